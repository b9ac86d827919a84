package duck

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestTargetRefDefaulting(t *testing.T) {
	for kind, want := range map[string]string{
		"Deployment": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "ReplicaSet": "apps/v1",
		"Job": "batch/v1", "CronJob": "batch/v1",
	} {
		r := TargetRef{Kind: kind, Name: "a"}
		r.Default()
		assert.Equal(t, want, r.APIVersion, kind)
	}
	custom := TargetRef{Kind: "AgentSet", Name: "a"}
	custom.Default()
	assert.Empty(t, custom.APIVersion, "custom kinds are never guessed")

	explicit := TargetRef{APIVersion: "apps/v1beta2", Kind: "Deployment", Name: "a"}
	explicit.Default()
	assert.Equal(t, "apps/v1beta2", explicit.APIVersion, "an explicit apiVersion is kept")
}

func TestTargetRefGVK(t *testing.T) {
	gvk, err := TargetRef{Kind: "CronJob", Name: "a"}.GroupVersionKind()
	assert.NoError(t, err)
	assert.Equal(t, schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, gvk)

	_, err = TargetRef{Kind: "AgentSet", Name: "a"}.GroupVersionKind()
	assert.EqualError(t, err, `apiVersion is required for kind "AgentSet"`)

	_, err = TargetRef{APIVersion: "a/b/c", Kind: "AgentSet", Name: "a"}.GroupVersionKind()
	assert.ErrorContains(t, err, `invalid apiVersion "a/b/c"`)
}

func TestTargetRefValidate(t *testing.T) {
	p := field.NewPath("spec", "targetRef")
	cases := []struct {
		ref  TargetRef
		want []string
	}{
		{TargetRef{Kind: "Deployment", Name: "weather-agent"}, nil},
		{TargetRef{APIVersion: "example.io/v1", Kind: "AgentSet", Name: "x"}, nil},
		{TargetRef{}, []string{"spec.targetRef.kind: Required value", "spec.targetRef.name: Required value"}},
		{TargetRef{Kind: "Deployment", Name: "Bad_Name"}, []string{"spec.targetRef.name: Invalid value"}},
		{TargetRef{Kind: "AgentSet", Name: "x"}, []string{"spec.targetRef.apiVersion: Invalid value"}},
	}
	for _, tc := range cases {
		errs := tc.ref.Validate(p)
		assert.Len(t, errs, len(tc.want), "%+v: %v", tc.ref, errs)
		for i, w := range tc.want {
			if i < len(errs) {
				assert.Contains(t, errs[i].Error(), w)
			}
		}
	}
}

func TestTargetRefString(t *testing.T) {
	assert.Equal(t, "Deployment.apps/a", TargetRef{Kind: "Deployment", Name: "a"}.String())
	assert.Equal(t, "AgentSet/a", TargetRef{Kind: "AgentSet", Name: "a"}.String())
}

func TestTargetKeyIgnoresVersion(t *testing.T) {
	a := TargetRefKeys(&testReferrer{Spec: testReferrerSpec{TargetRef: &TargetRef{APIVersion: "example.io/v1", Kind: "AgentSet", Name: "x"}}})
	b := TargetRefKeys(&testReferrer{Spec: testReferrerSpec{TargetRef: &TargetRef{APIVersion: "example.io/v2", Kind: "AgentSet", Name: "x"}}})
	assert.Equal(t, a, b)
	assert.Equal(t, []string{"AgentSet.example.io/x"}, a)
	assert.Nil(t, TargetRefKeys(&testReferrer{}), "objects without a targetRef are not indexed")
}
