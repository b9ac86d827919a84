package inject_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
)

func renderWith(t *testing.T, cfg *config.Config, labels, annotations map[string]string) *inject.Rendered {
	t.Helper()
	o, err := inject.ParseOptions("weather-agent", labels, annotations)
	require.NoError(t, err)
	r, err := inject.Render(cfg, o)
	require.NoError(t, err)
	return r
}

func agentTemplate(env ...corev1.EnvVar) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "agent", Image: "a:1", Env: env, Ports: []corev1.ContainerPort{{Name: "a2a", ContainerPort: 8081}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ping", Port: intstr.FromString("a2a")}}}},
	}}}
}

var proxyLabel = map[string]string{inject.LabelInterception: config.InterceptionProxy}

// TestProxyModeNeedsNoPrivilege: in proxy mode no container of the injection adds a capability,
// runs as root or may escalate, whatever the components and sidecar mode; and proxy-init, when
// spiffe-helper needs its helper.conf, installs no redirect.
func TestProxyModeNeedsNoPrivilege(t *testing.T) {
	for _, tc := range []struct {
		name    string
		labels  map[string]string
		classic bool
	}{
		{"default components", proxyLabel, false},
		{"spiffe", map[string]string{inject.LabelInterception: config.InterceptionProxy, inject.LabelSpiffe: "enabled"}, false},
		{"classic spiffe", map[string]string{inject.LabelInterception: config.InterceptionProxy, inject.LabelSpiffe: "enabled"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			if tc.classic {
				cfg.SidecarMode = config.SidecarClassic
			}
			out, _, err := inject.Inject(agentTemplate(), renderWith(t, cfg, tc.labels, nil))
			require.NoError(t, err)
			for _, c := range slices.Concat(out.Spec.InitContainers, out.Spec.Containers) {
				if c.Name == "agent" {
					continue
				}
				sc := c.SecurityContext
				require.NotNil(t, sc, c.Name)
				assert.Empty(t, sc.Capabilities.Add, "%s adds no capability (no NET_ADMIN, no NET_RAW)", c.Name)
				assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, c.Name)
				assert.True(t, *sc.RunAsNonRoot, c.Name)
				assert.NotZero(t, *sc.RunAsUser, c.Name)
				assert.False(t, *sc.AllowPrivilegeEscalation, c.Name)
				if c.Name == config.ProxyInit {
					assert.Contains(t, c.Args, "--intercept=false", "proxy-init only writes helper.conf")
				}
			}
			if tc.labels[inject.LabelSpiffe] == "" {
				assert.False(t, slices.ContainsFunc(out.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == config.ProxyInit }),
					"no init container without spiffe-helper")
			}
		})
	}
}

// TestProxyModeSetsTheProxyOnTheAgent: the agent's containers (not the sidecars) get the HTTP
// proxy variables naming the outbound proxy, NO_PROXY the pod itself and the annotation's hosts;
// the authbridge container names its inbound port for Services; the status says so; the agent's
// probes are left as written (the kubelet reaches its port directly).
func TestProxyModeSetsTheProxyOnTheAgent(t *testing.T) {
	cfg := config.Default()
	cfg.Identity.OutboundPort = 15999
	tmpl := agentTemplate(corev1.EnvVar{Name: "LOG_LEVEL", Value: "debug"})
	out, changed, err := inject.Inject(tmpl, renderWith(t, cfg, proxyLabel, map[string]string{inject.AnnotationNoProxy: "db.internal,.corp.example.com"}))
	require.NoError(t, err)
	require.True(t, changed)
	agent := out.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range agent.Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "debug", env["LOG_LEVEL"])
	for _, name := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"} {
		assert.Equal(t, "http://127.0.0.1:15999", env[name], name)
	}
	for _, name := range []string{"NO_PROXY", "no_proxy"} {
		assert.Equal(t, "localhost,127.0.0.1,::1,db.internal,.corp.example.com", env[name], name)
	}
	// An agent that listens on 127.0.0.1 only (so that the inbound proxy cannot be bypassed) is out
	// of the kubelet's reach: its probe goes to the authbridge, which runs it on loopback.
	require.NotNil(t, agent.ReadinessProbe.HTTPGet)
	assert.Equal(t, "/app-health/agent/readyz", agent.ReadinessProbe.HTTPGet.Path, "the probe is rewritten to the authbridge")
	assert.Equal(t, int32(15128), agent.ReadinessProbe.HTTPGet.Port.IntVal)
	i := slices.IndexFunc(out.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == config.Authbridge })
	require.GreaterOrEqual(t, i, 0)
	ab := out.Spec.InitContainers[i]
	assert.Empty(t, ab.Env, "the sidecar gets no proxy variables")
	assert.Equal(t, []corev1.ContainerPort{{Name: inject.PortNameInbound, ContainerPort: cfg.Identity.InboundPort}}, ab.Ports)
	st, err := inject.ReadStatus(out)
	require.NoError(t, err)
	assert.Equal(t, config.InterceptionProxy, st.Interception)
	assert.Equal(t, inject.PortNameInbound, st.ServiceTargetPort)
	assert.Equal(t, []string{"agent"}, st.ProxyEnv)

	// Transparent mode records none of it.
	out, _, err = inject.Inject(tmpl, renderWith(t, cfg, nil, nil))
	require.NoError(t, err)
	st, err = inject.ReadStatus(out)
	require.NoError(t, err)
	assert.Empty(t, st.Interception+st.ServiceTargetPort)
	assert.Nil(t, st.ProxyEnv)
}

// TestProxyModeIsTheConfiguredDefault: the injector's interception setting applies to a workload
// without the label; the label wins over it.
func TestProxyModeIsTheConfiguredDefault(t *testing.T) {
	cfg := config.Default()
	cfg.Interception = config.InterceptionProxy
	require.NoError(t, cfg.Validate())
	assert.Equal(t, config.InterceptionProxy, renderWith(t, cfg, nil, nil).Interception)
	assert.Equal(t, config.InterceptionTransparent, renderWith(t, cfg, map[string]string{inject.LabelInterception: config.InterceptionTransparent}, nil).Interception)

	cfg.Interception = "sidecarless"
	assert.ErrorContains(t, cfg.Validate(), `interception: "sidecarless" is not one of transparent, proxy`)
	_, err := inject.ParseOptions("w", map[string]string{inject.LabelInterception: "Proxy"}, nil)
	assert.EqualError(t, err, `kagenti.io/interception: invalid value "Proxy": accepted values: transparent (nftables redirects set up by proxy-init, which needs NET_ADMIN), proxy (HTTP_PROXY on the agent's containers; no init container, no added capability)`)
	_, err = inject.ParseOptions("w", nil, map[string]string{inject.AnnotationNoProxy: "a.example, b example"})
	assert.ErrorContains(t, err, `kagenti.io/no-proxy: invalid value "a.example, b example": "b example" is not a host`)
}

// TestProxyModeRefusesTheUsersProxyVariables: an agent container that sets one of the proxy
// variables itself is refused, naming the variable's field, instead of overwritten (its proxy
// silently unused) or kept (its calls bypassing the outbound proxy).
func TestProxyModeRefusesTheUsersProxyVariables(t *testing.T) {
	r := renderWith(t, config.Default(), proxyLabel, nil)
	_, _, err := inject.Inject(agentTemplate(corev1.EnvVar{Name: "A", Value: "1"}, corev1.EnvVar{Name: "https_proxy", Value: "http://corp-proxy:3128"}), r)
	var pe *inject.ProxyEnvError
	require.True(t, errors.As(err, &pe), "%v", err)
	assert.EqualError(t, err, `spec.containers[0].env[1] ("agent"): https_proxy is set by the injector in proxy mode (kagenti.io/interception: proxy): the agent's HTTP calls go through the outbound proxy, which does not chain to another proxy; remove the variable, or use kagenti.io/interception: transparent`)
	_, _, err = inject.Inject(agentTemplate(corev1.EnvVar{Name: "NO_PROXY", Value: "db"}), r)
	assert.ErrorContains(t, err, "list the hosts to reach directly in the annotation kagenti.io/no-proxy")

	_, changed, err := inject.Inject(agentTemplate(corev1.EnvVar{Name: "HTTP_PROXY", Value: "http://corp-proxy:3128"}), renderWith(t, config.Default(), nil, nil))
	require.NoError(t, err, "transparent mode leaves the user's variables alone")
	assert.True(t, changed)
}

// TestSwitchingModesReinjects: a workload moved between modes is re-injected as a fresh
// injection in the new mode, and leaves nothing of the old one.
func TestSwitchingModesReinjects(t *testing.T) {
	cfg := config.Default()
	tmpl := agentTemplate()
	transparent, proxy := renderWith(t, cfg, nil, nil), renderWith(t, cfg, proxyLabel, nil)
	inTransparent, _, err := inject.Inject(tmpl, transparent)
	require.NoError(t, err)
	inProxy, _, err := inject.Inject(tmpl, proxy)
	require.NoError(t, err)

	moved, changed, err := inject.Inject(inTransparent, proxy)
	require.NoError(t, err)
	require.True(t, changed)
	assert.True(t, equality.Semantic.DeepEqual(inProxy, moved), "transparent → proxy equals a fresh proxy injection")
	back, changed, err := inject.Inject(moved, transparent)
	require.NoError(t, err)
	require.True(t, changed)
	assert.True(t, equality.Semantic.DeepEqual(inTransparent, back), "proxy → transparent equals a fresh transparent injection")

	// A container added after a proxy-mode injection gets the variables on the next admission.
	inProxy.Spec.Containers = append(inProxy.Spec.Containers, corev1.Container{Name: "late", Image: "b:1"})
	again, changed, err := inject.Inject(inProxy, proxy)
	require.NoError(t, err)
	require.True(t, changed)
	assert.Len(t, again.Spec.Containers[1].Env, 6)
}
