package contract

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The label keys are the Kubernetes recommended labels: tools (kubectl, dashboards, kustomize)
// group objects by these exact keys.
func TestRecommendedLabelKeys(t *testing.T) {
	for key, want := range map[string]string{
		PartOfLabel:    "app.kubernetes.io/part-of",
		ComponentLabel: "app.kubernetes.io/component",
		ManagedByLabel: "app.kubernetes.io/managed-by",
	} {
		assert.Equal(t, want, key)
		assert.Empty(t, validation.IsQualifiedName(key), key)
	}
}

func TestComponentsOfContainer(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"auth-proxy", []string{"inbound"}, []string{"auth-proxy"}},
		{"spiffe-helper", nil, []string{"spiffe-helper"}},
		{"authbridge", []string{"sidecar", "register", "inbound", "outbound"}, []string{"client-registration", "auth-proxy", "envoy-proxy"}},
		{"authbridge", []string{"sidecar", "inbound", "outbound"}, []string{"auth-proxy", "envoy-proxy"}},
		{"authbridge", []string{"inbound"}, nil},
		{"authbridge", nil, nil},
		{"agent", []string{"sidecar", "inbound"}, nil},
	} {
		assert.Equal(t, tc.want, ComponentsOfContainer(tc.name, tc.args), "%s %v", tc.name, tc.args)
	}
}
