package inject_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
)

func render(t testing.TB, cfg *config.Config) *inject.Rendered {
	o, err := inject.ParseOptions("weather-agent", nil, nil)
	require.NoError(t, err)
	r, err := inject.Render(cfg, o)
	require.NoError(t, err)
	return r
}

// A user container or volume with the name of an injected one wins, and removal keeps it.
func TestOverrideByName(t *testing.T) {
	userEnvoy := corev1.Container{Name: config.EnvoyProxy, Image: "example.com/my-envoy:1"}
	userTrace := corev1.Volume{Name: inject.VolumeTrace, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "agent", Image: "a:1", Env: []corev1.EnvVar{{Name: inject.EnvTraceDir, Value: "/mine"}}}, userEnvoy},
		Volumes:    []corev1.Volume{userTrace},
	}}
	out, changed, err := inject.Inject(tmpl, render(t, config.Default()))
	require.NoError(t, err)
	require.True(t, changed)

	var envoys int
	for _, c := range append(out.Spec.InitContainers, out.Spec.Containers...) {
		if c.Name == config.EnvoyProxy {
			envoys++
			require.Equal(t, userEnvoy, c, "the user's envoy-proxy is kept as written")
		}
	}
	require.Equal(t, 1, envoys)
	for _, v := range out.Spec.Volumes {
		if v.Name == inject.VolumeTrace {
			require.Equal(t, userTrace, v, "the user's kagenti-trace volume is kept as written")
		}
	}
	agent := out.Spec.Containers[0]
	require.Equal(t, []corev1.EnvVar{{Name: inject.EnvTraceDir, Value: "/mine"}}, agent.Env, "the user's own KAGENTI_TRACE_DIR is kept")

	st, err := inject.ReadStatus(out)
	require.NoError(t, err)
	require.NotContains(t, st.InitContainers, config.EnvoyProxy)
	require.NotContains(t, st.Volumes, inject.VolumeTrace)

	removed, _, err := inject.Remove(out)
	require.NoError(t, err)
	require.Equal(t, tmpl, removed, "removal keeps everything of the user's")
}

func TestInjectAddsTraceToNewUserContainer(t *testing.T) {
	r := render(t, config.Default())
	out, _, err := inject.Inject(&corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "a:1"}}}}, r)
	require.NoError(t, err)
	out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: "late", Image: "b:1"})
	again, changed, err := inject.Inject(out, r)
	require.NoError(t, err)
	require.True(t, changed, "a container added after injection gets the trace mount")
	require.Len(t, again.Spec.Containers[1].VolumeMounts, 1)
}

func TestInjectClassicAppendsSidecars(t *testing.T) {
	cfg := config.Default()
	cfg.SidecarMode = config.SidecarClassic
	out, _, err := inject.Inject(&corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "a:1"}}}}, render(t, cfg))
	require.NoError(t, err)
	require.Equal(t, "agent", out.Spec.Containers[0].Name, "the user's container stays first (kubectl's default container)")
	require.Len(t, out.Spec.InitContainers, 1)
	require.Equal(t, config.ProxyInit, out.Spec.InitContainers[0].Name)
	for _, c := range out.Spec.Containers[1:] {
		require.Nil(t, c.RestartPolicy)
	}
}

func TestReadStatusRejectsForeignValue(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{}
	tmpl.Annotations = map[string]string{inject.AnnotationStatus: "{not json"}
	_, _, err := inject.Inject(tmpl, render(t, config.Default()))
	var bad *inject.InvalidError
	require.ErrorAs(t, err, &bad)
	require.Equal(t, inject.AnnotationStatus, bad.Key)
}
