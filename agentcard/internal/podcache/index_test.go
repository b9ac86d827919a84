package podcache

import (
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// A sync lists its pods through the label index when its selector has one equality requirement on
// a label the index keeps.
func TestIndexedRequirement(t *testing.T) {
	for sel, want := range map[string]string{
		"app=weather":                      "app=weather",
		"app==weather,tier!=db":            "app=weather",
		"tier notin (db),app in (weather)": "app=weather",
		"app in (a,b)":                     "",
		"app,!legacy":                      "",
		"app!=weather":                     "",
		// Labels the index leaves out are never looked up; another requirement is.
		"kagenti.io/signature-verified=true":       "",
		"app=weather,pod-template-hash=7b6c8747f":  "app=weather",
		"controller-revision-hash=abc,app=weather": "app=weather",
		"statefulset.kubernetes.io/pod-name=db-0":  "",
	} {
		s, err := labels.Parse(sel)
		require.NoError(t, err)
		got, ok := indexedRequirement(s)
		assert.Equal(t, want, got, sel)
		assert.Equal(t, want != "", ok, sel)
	}
}

// The index keeps a pod's labels but agentcard's own verdict and the per-pod and per-revision
// hashes the workload controllers add.
func TestPodIndexValues(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		"app": "weather", "tier": "agent", "pod-template-hash": "7b6c8747f", "kagenti.io/signature-verified": "true",
	}}}
	got := IndexValues(p)
	sort.Strings(got)
	assert.Equal(t, []string{"app=weather", "tier=agent"}, got)
}
