package resources

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

func TestAgentCardForTargetsAndIsControlledByTheWorkload(t *testing.T) {
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("apps/v1")
	w.SetKind("StatefulSet")
	w.SetNamespace("agents")
	w.SetName("weather")
	w.SetUID("uid-1")
	c := AgentCardFor(w)
	assert.Equal(t, configmap.AgentCardName("weather", "StatefulSet"), c.Name)
	assert.Equal(t, "agents", c.Namespace)
	assert.Equal(t, ManagedBy, c.Labels[contract.ManagedByLabel])
	if assert.Len(t, c.OwnerReferences, 1) {
		o := c.OwnerReferences[0]
		assert.Equal(t, "apps/v1", o.APIVersion)
		assert.Equal(t, "StatefulSet", o.Kind)
		assert.Equal(t, "weather", o.Name)
		assert.Equal(t, "uid-1", string(o.UID))
		assert.True(t, *o.Controller)
		assert.True(t, *o.BlockOwnerDeletion)
	}
	assert.Nil(t, c.Spec.Selector)
	assert.Equal(t, "apps/v1", c.Spec.TargetRef.APIVersion)
	assert.Equal(t, "StatefulSet", c.Spec.TargetRef.Kind)
	assert.Equal(t, "weather", c.Spec.TargetRef.Name)
}
