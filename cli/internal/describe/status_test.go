package describe

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
)

// Both status versions the injector wrote before the combined sidecar name the same components: v1
// lists them, v2 lists only what the template had of its own (a user's envoy-proxy, kept).
func TestInjectedComponentsOfEitherStatusVersion(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "proxy-init"}, {Name: "client-registration"}, {Name: "auth-proxy"}, {Name: "setup"}},
		Containers:     []corev1.Container{{Name: "agent"}, {Name: "envoy-proxy"}},
	}}
	v1 := `{"version":"v1","hash":"0c66dd10cedbcec8","initContainers":["proxy-init","client-registration","auth-proxy"],"volumes":["kagenti-shared"]}`
	v2 := `{"version":"v2","hash":"0c66dd10cedbcec8","kept":["envoy-proxy"]}`
	want := []string{"proxy-init", "client-registration", "auth-proxy"}
	for name, raw := range map[string]string{"v1": v1, "v2": v2} {
		st, got, containers := injectedComponents(raw, tmpl)
		assert.Equal(t, want, got, name)
		assert.Equal(t, name, st["version"])
		assert.Len(t, containers, 3, name)
		assert.Empty(t, combinedContainers(containers), "one component per container")
	}
	st, got, _ := injectedComponents("{not json", tmpl)
	assert.Nil(t, st)
	assert.Empty(t, got)
}

// v3 and v4: one authbridge container runs the roles its arguments name; a user container named
// after a role (no longer an injected name) is the user's.
func TestInjectedComponentsOfTheCombinedSidecar(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "proxy-init", Args: []string{"init"}}, {Name: "authbridge", Args: []string{"sidecar", "register", "outbound"}}},
		Containers:     []corev1.Container{{Name: "agent"}, {Name: "auth-proxy"}},
	}}
	for _, version := range []string{"v3", "v4"} {
		st, got, containers := injectedComponents(`{"version":"`+version+`","hash":"227465844941c2b4"}`, tmpl)
		assert.Equal(t, version, st["version"])
		assert.Equal(t, []string{"proxy-init", "client-registration", "envoy-proxy"}, got)
		assert.Equal(t, []InjectedContainer{{Name: "proxy-init", Components: []string{"proxy-init"}}, {Name: "authbridge", Components: []string{"client-registration", "envoy-proxy"}}}, containers)
		assert.Equal(t, "container authbridge runs client-registration, envoy-proxy", combinedContainers(containers))

		_, got, _ = injectedComponents(`{"version":"`+version+`","hash":"227465844941c2b4","kept":["authbridge"]}`, tmpl)
		assert.Equal(t, []string{"proxy-init"}, got, "the user's own authbridge is not the injector's")
	}
}

// The token-exchange ConfigMap is mounted as a volume of its own up to injection v3, projected into
// the identity volume since v4: describe counts the pods of both.
func TestMountsConfigMap(t *testing.T) {
	v3 := &corev1.PodSpec{Volumes: []corev1.Volume{{Name: "kagenti-token-exchange", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "echo-token-exchange"}}}}}}
	v4 := &corev1.PodSpec{Volumes: []corev1.Volume{{Name: "kagenti-identity", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{DownwardAPI: &corev1.DownwardAPIProjection{}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "echo-token-exchange"}}},
	}}}}}}
	for name, spec := range map[string]*corev1.PodSpec{"v3": v3, "v4": v4} {
		assert.True(t, mountsConfigMap(spec, "echo-token-exchange"), name)
		assert.False(t, mountsConfigMap(spec, "echo-trace"), name)
	}
	assert.False(t, mountsConfigMap(&corev1.PodSpec{}, "echo-token-exchange"))
}
