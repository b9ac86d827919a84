package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kagenti/platform/netpol/internal/resources"
	"github.com/kagenti/platform/pkg/duck"
)

// TestCacheKeepsWhatNetpolReads: the workload caches hold a workload's selector and template labels,
// from which the policy is rendered exactly as from the whole object, and nothing else of its spec.
func TestCacheKeepsWhatNetpolReads(t *testing.T) {
	transforms := map[string]func(any) (any, error){}
	for obj, by := range CacheByObject() {
		if u, ok := obj.(*unstructured.Unstructured); ok && by.Transform != nil {
			transforms[u.GetKind()] = by.Transform
		}
	}
	for _, gvk := range duck.BuiltinKinds() {
		require.Contains(t, transforms, gvk.Kind, "the %s cache is trimmed", gvk.Kind)
	}
	d := deploymentObject("trim", "default")
	d.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
	require.NoError(t, err)
	full := &unstructured.Unstructured{Object: raw}
	full.SetAPIVersion("apps/v1")
	full.SetKind("Deployment")
	trimmedObj, err := transforms["Deployment"](full.DeepCopy())
	require.NoError(t, err)
	trimmed := trimmedObj.(*unstructured.Unstructured)

	assert.Empty(t, trimmed.GetManagedFields())
	_, found, _ := unstructured.NestedSlice(trimmed.Object, "spec", "template", "spec", "containers")
	assert.False(t, found, "containers are not cached")
	want, err := duck.NewWorkload(full)
	require.NoError(t, err)
	got, err := duck.NewWorkload(trimmed)
	require.NoError(t, err)
	wantSel, err := resources.WorkloadPodSelector(want)
	require.NoError(t, err)
	gotSel, err := resources.WorkloadPodSelector(got)
	require.NoError(t, err)
	assert.Equal(t, wantSel, gotSel)
}
