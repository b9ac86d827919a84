package inject_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
	"github.com/kagenti/platform/pkg/configmap/appprobe"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

func httpProbe(port intstr.IntOrString) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ping", Port: port, Scheme: corev1.URISchemeHTTP}},
		TimeoutSeconds: 2, PeriodSeconds: 5}
}

func injectWith(t *testing.T, cfg *config.Config, annotations map[string]string, tmpl *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	t.Helper()
	o, err := inject.ParseOptions("weather-agent", nil, annotations)
	require.NoError(t, err)
	o.ReadTemplate(tmpl)
	r, err := inject.Render(cfg, o)
	require.NoError(t, err)
	out, changed, err := inject.Inject(tmpl, r)
	require.NoError(t, err)
	require.True(t, changed)
	return out
}

func appProbesOf(t *testing.T, tmpl *corev1.PodTemplateSpec) map[string]appprobe.AppProbe {
	t.Helper()
	_, line := contract.SplitAppProbes(tmpl.Annotations[inject.AnnotationIdentityDefaults])
	probes, err := appprobe.Parse(line)
	require.NoError(t, err)
	return probes
}

func agentWith(probe *corev1.Probe) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "agent", Image: "a:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8081}},
		ReadinessProbe: probe,
	}}}}
}

// A probe on a port proxy-init redirects becomes a GET on the authbridge status port at the path
// that names it; the kubelet keeps its schedule and timeout; the original, with the named port
// resolved, is in the identity defaults the authbridge reads; removal restores it exactly.
func TestProbeOnInterceptedPortIsServedByAuthbridge(t *testing.T) {
	tmpl := agentWith(httpProbe(intstr.FromString("http")))
	out := injectWith(t, config.Default(), nil, tmpl)

	got := out.Spec.Containers[0].ReadinessProbe
	require.Equal(t, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/app-health/agent/readyz", Port: intstr.FromInt32(contract.StatusPortAuthbridge)}},
		TimeoutSeconds: 2, PeriodSeconds: 5}, got)
	require.Equal(t, map[string]appprobe.AppProbe{"agent/readyz": {ProbeHandler: tmpl.Spec.Containers[0].ReadinessProbe.ProbeHandler,
		TimeoutSeconds: 2, AppPort: 8081}}, appProbesOf(t, out))
	require.Equal(t, "/ping", tmpl.Spec.Containers[0].ReadinessProbe.HTTPGet.Path, "the input template is not modified")

	removed, _, err := inject.Remove(out)
	require.NoError(t, err)
	require.True(t, equality.Semantic.DeepEqual(tmpl, removed), "removal restores the probes:\n%s", yamlOf(t, removed))
}

// Every kind of probe the kubelet sends over the network is rewritten (httpGet, tcpSocket, grpc);
// exec probes, probes with a host of their own, named ports the container does not declare, the
// workload's excluded inbound ports and the sidecars' own ports are left as written.
func TestWhichProbesAreRewritten(t *testing.T) {
	tcp := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8081)}}}
	grpc := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9000}}}
	exec := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	withHost := httpProbe(intstr.FromInt32(8081))
	withHost.HTTPGet.Host = "10.0.0.1"
	for _, tc := range []struct {
		name        string
		probe       *corev1.Probe
		annotations map[string]string
		rewritten   bool
		appPort     int32
	}{
		{"httpGet on the agent's port", httpProbe(intstr.FromInt32(8081)), nil, true, 0},
		{"tcpSocket", tcp, nil, true, 0},
		{"grpc", grpc, nil, true, 0},
		// The inbound proxy's own port is never redirected, but the proxy asks for a token: the
		// probe is run against the port it forwards to.
		{"httpGet on the inbound proxy's port", httpProbe(intstr.FromInt32(8080)), nil, true, 8081},
		{"exec", exec, nil, false, 0},
		{"httpGet with a host", withHost, nil, false, 0},
		{"an undeclared named port", httpProbe(intstr.FromString("metrics")), nil, false, 0},
		{"an excluded inbound port", httpProbe(intstr.FromInt32(9090)), map[string]string{inject.AnnotationInboundExclude: "9090"}, false, 0},
		{"a status port of the sidecars", httpProbe(intstr.FromInt32(contract.StatusPortAuthbridge)), nil, false, 0},
		{"the workload opts out", httpProbe(intstr.FromInt32(8081)), map[string]string{inject.AnnotationRewriteAppProbes: "false"}, false, 0},
		{"no inbound proxy", httpProbe(intstr.FromInt32(8081)), map[string]string{inject.AnnotationExcludeComponents: "auth-proxy"}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := agentWith(tc.probe)
			out := injectWith(t, config.Default(), tc.annotations, tmpl)
			got := out.Spec.Containers[0].ReadinessProbe
			if !tc.rewritten {
				require.Equal(t, tc.probe, got)
				require.Empty(t, appProbesOf(t, out))
				return
			}
			require.Equal(t, "/app-health/agent/readyz", got.HTTPGet.Path)
			rec := appProbesOf(t, out)["agent/readyz"]
			require.Equal(t, tc.probe.ProbeHandler, rec.ProbeHandler)
			require.Equal(t, tc.appPort, rec.AppPort)
		})
	}
}

// The injector configuration switches the rewrite off for every workload.
func TestProbeRewriteConfigSwitch(t *testing.T) {
	cfg := config.Default()
	require.True(t, cfg.RewriteAppProbes, "on by default")
	parsed, err := config.Parse([]byte("rewriteAppProbes: false\n"))
	require.NoError(t, err)
	require.False(t, parsed.RewriteAppProbes)

	tmpl := agentWith(httpProbe(intstr.FromInt32(8081)))
	out := injectWith(t, parsed, nil, tmpl)
	require.Equal(t, tmpl.Spec.Containers[0].ReadinessProbe, out.Spec.Containers[0].ReadinessProbe)
}

func TestRewriteAppProbesAnnotationIsValidated(t *testing.T) {
	_, err := inject.ParseOptions("w", nil, map[string]string{inject.AnnotationRewriteAppProbes: "no"})
	var invalid *inject.InvalidError
	require.ErrorAs(t, err, &invalid)
	require.Equal(t, inject.AnnotationRewriteAppProbes, invalid.Key)
	require.Contains(t, err.Error(), "accepted values: true")
	o, err := inject.ParseOptions("w", nil, map[string]string{inject.AnnotationRewriteAppProbes: "true"})
	require.NoError(t, err)
	require.False(t, o.KeepAppProbes)
}

// Opting out later restores the probes on the next admission; a probe the user changed since the
// rewrite is the user's, kept by removal; a probe added since is rewritten on the next admission.
func TestProbeRewriteFollowsTheTemplate(t *testing.T) {
	tmpl := agentWith(httpProbe(intstr.FromInt32(8081)))
	out := injectWith(t, config.Default(), nil, tmpl)

	optedOut := injectWith(t, config.Default(), map[string]string{inject.AnnotationRewriteAppProbes: "false"}, out)
	require.Equal(t, tmpl.Spec.Containers[0].ReadinessProbe, optedOut.Spec.Containers[0].ReadinessProbe)
	require.Empty(t, appProbesOf(t, optedOut))

	edited := out.DeepCopy()
	mine := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	edited.Spec.Containers[0].ReadinessProbe = mine
	removed, _, err := inject.Remove(edited)
	require.NoError(t, err)
	require.Equal(t, mine, removed.Spec.Containers[0].ReadinessProbe)

	added := out.DeepCopy()
	added.Spec.Containers[0].LivenessProbe = httpProbe(intstr.FromInt32(8081))
	again := injectWith(t, config.Default(), nil, added)
	require.Equal(t, "/app-health/agent/livez", again.Spec.Containers[0].LivenessProbe.HTTPGet.Path)
	require.Len(t, appProbesOf(t, again), 2)
}

// A user's native sidecar (an init container that keeps running) has probes too; a user's own
// authbridge container means the injected one, which serves the rewritten probes, is not added.
func TestProbesOfInitContainersAndOverride(t *testing.T) {
	tmpl := agentWith(nil)
	tmpl.Spec.InitContainers = []corev1.Container{{Name: "cache", Image: "c:1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		StartupProbe: httpProbe(intstr.FromInt32(6379))}}
	out := injectWith(t, config.Default(), nil, tmpl)
	i := len(out.Spec.InitContainers) - 1
	require.Equal(t, "cache", out.Spec.InitContainers[i].Name)
	require.Equal(t, "/app-health/cache/startupz", out.Spec.InitContainers[i].StartupProbe.HTTPGet.Path)

	own := agentWith(httpProbe(intstr.FromInt32(8081)))
	own.Spec.Containers = append(own.Spec.Containers, corev1.Container{Name: config.Authbridge, Image: "mine:1"})
	out = injectWith(t, config.Default(), nil, own)
	require.Equal(t, own.Spec.Containers[0].ReadinessProbe, out.Spec.Containers[0].ReadinessProbe)
	o, err := inject.ParseOptions("weather-agent", nil, nil)
	require.NoError(t, err)
	o.ReadTemplate(out)
	r, err := inject.Render(config.Default(), o)
	require.NoError(t, err)
	_, changed, err := inject.Inject(out, r)
	require.NoError(t, err)
	require.False(t, changed, "injecting again changes nothing")
}

// testdata/v4 holds what an injector of status v4 wrote for the DaemonSet input, whose agent has
// probes: v4 left them on the agent's port, where the inbound proxy refuses them. The next
// admission rewrites them, and removal gives the input back.
func TestStatusV4IsUpgradedWithProbes(t *testing.T) {
	forEachOldInjection(t, "testdata/v4", inject.StatusV4, func(t *testing.T, o oldInjection) {
		require.Equal(t, "/ping", o.injected.Spec.Containers[0].ReadinessProbe.HTTPGet.Path, "v4 left the probe as written")
		_, again := o.removeAndReinject(t)
		require.Equal(t, "/app-health/agent/readyz", again.Spec.Containers[0].ReadinessProbe.HTTPGet.Path)
		st, err := inject.ReadStatus(again)
		require.NoError(t, err)
		require.Equal(t, inject.StatusV5, st.Version)
	})
}
