package templates

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/kagenti/platform/agentbuild/internal/testsupport"
)

// The controller sees only labelled ConfigMaps: every shipped template and step must be one.
func TestShippedTemplatesAreSelected(t *testing.T) {
	cms := testsupport.DefaultTemplates(t, DefaultNamespace)
	require.NotEmpty(t, cms)
	for _, cm := range cms {
		assert.True(t, Selector().Matches(labels.Set(cm.Labels)), "%s lacks label %s=%s", cm.Name, Label, LabelValue)
	}
	assert.False(t, Selector().Matches(labels.Set{Label: "yes"}), "only the value true counts")
}

// Trim keeps what Loader reads (name, namespace, the template or task spec) and drops the rest,
// whatever the user put in the ConfigMap.
func TestTrim(t *testing.T) {
	in := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "team-a", Name: "step-x", UID: "u", ResourceVersion: "7",
			Labels:        map[string]string{Label: LabelValue, "app": "x"},
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{…the whole ConfigMap again…}"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Data:       map[string]string{TaskSpecKey: "steps: []", "README": "a long note"},
		BinaryData: map[string][]byte{"logo.png": make([]byte, 1024)},
	}
	out, err := Trim(in)
	require.NoError(t, err)
	assert.Equal(t, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "step-x", UID: "u", ResourceVersion: "7"},
		Data:       map[string]string{TaskSpecKey: "steps: []"},
	}, out)

	tombstone := cache.DeletedFinalStateUnknown{Key: "team-a/step-x"}
	out, err = Trim(tombstone)
	require.NoError(t, err)
	assert.Equal(t, tombstone, out)
}
