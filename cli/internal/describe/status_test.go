package describe

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
)

// Both status versions the injector writes name the same components: v1 lists them, v2 lists only
// what the template had of its own (a user's envoy-proxy, kept).
func TestInjectedComponentsOfEitherStatusVersion(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "proxy-init"}, {Name: "client-registration"}, {Name: "auth-proxy"}, {Name: "setup"}},
		Containers:     []corev1.Container{{Name: "agent"}, {Name: "envoy-proxy"}},
	}}
	v1 := `{"version":"v1","hash":"0c66dd10cedbcec8","initContainers":["proxy-init","client-registration","auth-proxy"],"volumes":["kagenti-shared"]}`
	v2 := `{"version":"v2","hash":"0c66dd10cedbcec8","kept":["envoy-proxy"]}`
	want := []string{"proxy-init", "client-registration", "auth-proxy"}
	for name, raw := range map[string]string{"v1": v1, "v2": v2} {
		st, got := injectedComponents(raw, tmpl)
		assert.Equal(t, want, got, name)
		assert.Equal(t, name, st["version"])
	}
	st, got := injectedComponents("{not json", tmpl)
	assert.Nil(t, st)
	assert.Empty(t, got)
}
