package inject_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/contract"
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
	userEnvoy := corev1.Container{Name: config.Authbridge, Image: "example.com/my-authbridge:1"}
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
		if c.Name == config.Authbridge {
			envoys++
			require.Equal(t, userEnvoy, c, "the user's authbridge is kept as written")
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
	require.Equal(t, []string{config.Authbridge, inject.VolumeTrace}, st.Kept, "the status records the user's as kept")

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

// A user container that declares a port an injected container listens on is refused, naming the
// container, the port and the configuration field it clashes with; the ports come from the
// configuration and from what is injected.
func TestInjectPortConflict(t *testing.T) {
	agent := func(ports ...corev1.ContainerPort) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "setup", Image: "s:1"}},
			Containers:     []corev1.Container{{Name: "agent", Image: "a:1", Ports: ports}},
		}}
	}
	tcp := func(p int32) corev1.ContainerPort { return corev1.ContainerPort{ContainerPort: p} }
	moved := config.Default()
	moved.Identity.InboundPort = 9090
	moved.Identity.OutboundPort = 15001
	for _, tc := range []struct {
		name        string
		cfg         *config.Config
		annotations map[string]string
		tmpl        *corev1.PodTemplateSpec
		want        string // "" when admitted
	}{
		{"inbound port", config.Default(), nil, agent(tcp(8081), tcp(8080)),
			`spec.containers[0] ("agent"): port 8080/TCP is the port the injected auth-proxy listens on (identity.inboundPort of the injector configuration)`},
		{"outbound port", config.Default(), nil, agent(tcp(15123)),
			`spec.containers[0] ("agent"): port 15123/TCP is the port the injected envoy-proxy listens on (identity.outboundPort`},
		{"init container", config.Default(), nil, &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "setup", Image: "s:1"}, {Name: "cache", Image: "c:1", Ports: []corev1.ContainerPort{tcp(8080)}}},
			Containers:     []corev1.Container{{Name: "agent", Image: "a:1"}},
		}}, `spec.initContainers[1] ("cache"): port 8080/TCP`},
		{"the agent's own port", config.Default(), nil, agent(tcp(8081)), ""},
		{"another protocol", config.Default(), nil, agent(corev1.ContainerPort{ContainerPort: 8080, Protocol: corev1.ProtocolUDP}), ""},
		{"auth-proxy excluded", config.Default(), map[string]string{inject.AnnotationExcludeComponents: "auth-proxy"}, agent(tcp(8080)), ""},
		{"ports moved by the configuration: old port free", moved, nil, agent(tcp(8080), tcp(15123)), ""},
		{"ports moved by the configuration: new port taken", moved, nil, agent(tcp(9090)), `port 9090/TCP is the port the injected auth-proxy`},
		{"the user's own authbridge", config.Default(), nil, &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "agent", Image: "a:1"}, {Name: config.Authbridge, Image: "mine:1", Ports: []corev1.ContainerPort{tcp(8080)}},
		}}}, ""},
		// Since the roles run in one container, a container named after a role is the user's.
		{"a user container named after a role", config.Default(), nil, &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "agent", Image: "a:1"}, {Name: config.AuthProxy, Image: "mine:1", Ports: []corev1.ContainerPort{tcp(8080)}},
		}}}, `spec.containers[1] ("auth-proxy"): port 8080/TCP is the port the injected auth-proxy listens on`},
		{"the combined sidecar's status port", config.Default(), map[string]string{inject.AnnotationExcludeComponents: "auth-proxy"}, agent(tcp(15128)),
			`port 15128/TCP is the port the injected authbridge listens on (its fixed status port); use another port, or exclude client-registration, auth-proxy and envoy-proxy with kagenti.io/exclude-components`},
		{"no authbridge, no status port", config.Default(), map[string]string{inject.AnnotationExcludeComponents: "client-registration,auth-proxy,envoy-proxy"}, agent(tcp(15128)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := inject.ParseOptions("w", nil, tc.annotations)
			require.NoError(t, err)
			r, err := inject.Render(tc.cfg, o)
			require.NoError(t, err)
			_, _, err = inject.Inject(tc.tmpl, r)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			var conflict *inject.PortConflictError
			require.ErrorAs(t, err, &conflict)
			require.Contains(t, err.Error(), tc.want)
			require.Contains(t, err.Error(), "use another port, or exclude")
		})
	}

	t.Run("a port added to an injected template", func(t *testing.T) {
		r := render(t, config.Default())
		out, _, err := inject.Inject(agent(tcp(8081)), r)
		require.NoError(t, err)
		out.Spec.Containers[0].Ports = append(out.Spec.Containers[0].Ports, tcp(15123))
		_, _, err = inject.Inject(out, r)
		require.ErrorContains(t, err, "port 15123/TCP", "an unchanged injection is checked too")
	})
}

func TestNotInjectable(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "a:1"}}}}
	require.Empty(t, inject.NotInjectable(tmpl))
	tmpl.Spec.HostNetwork = true
	require.Contains(t, inject.NotInjectable(tmpl), "hostNetwork: true")
}

func TestCheckTemplateSignatureLabel(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{}
	require.NoError(t, inject.CheckTemplate(tmpl))
	tmpl.Labels = map[string]string{"app": "agent", inject.LabelSignatureVerified: "true"}
	err := inject.CheckTemplate(tmpl)
	var bad *inject.InvalidError
	require.ErrorAs(t, err, &bad)
	require.Equal(t, inject.LabelSignatureVerified, bad.Key)
	require.Contains(t, err.Error(), `kagenti.io/signature-verified: invalid value "true": only agentcard sets this label`)
}

// The data plane's status ports bind in the pod's network namespace too.
func TestStatusPortConflictDenied(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "a:1",
		Ports: []corev1.ContainerPort{{ContainerPort: 15125}}}}}}
	_, _, err := inject.Inject(tmpl, render(t, config.Default()))
	var conflict *inject.PortConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, config.AuthProxy, conflict.Listener.Component)
	require.ErrorContains(t, err, "port 15125/TCP is the port the injected auth-proxy listens on (its fixed status port)")
}

// The status hash follows what is rendered, not the inputs: a configuration change that renders the
// same template (resources of a component this workload does not get) leaves it, so no rollout;
// one that renders differently changes it, as an injector upgrade that renders differently does.
func TestHashFollowsTheRenderedOutput(t *testing.T) {
	base := render(t, config.Default())

	unused := config.Default()
	helper := unused.Components[config.SpiffeHelper]
	helper.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}
	unused.Components[config.SpiffeHelper] = helper // spiffe-helper is not injected without kagenti.io/spiffe
	require.NotEqual(t, config.Default().Hash(), unused.Hash())
	same := render(t, unused)
	require.Equal(t, base.InitContainers, same.InitContainers)
	require.Equal(t, base.Hash, same.Hash, "the same injection, the same hash")

	used := config.Default()
	authbridge := used.Components[config.Authbridge]
	authbridge.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}
	used.Components[config.Authbridge] = authbridge
	require.NotEqual(t, base.Hash, render(t, used).Hash, "another injection, another hash")
}

// Inject shares the rendered containers and volumes with its output (a cached rendering serves
// many admissions): injecting, re-injecting over an older injection and removing must leave the
// rendering as it was.
func TestInjectLeavesTheRenderingUnchanged(t *testing.T) {
	r := render(t, config.Default())
	want := *r
	want.InitContainers = slices.Clone(r.InitContainers)
	for i := range want.InitContainers {
		want.InitContainers[i] = *r.InitContainers[i].DeepCopy()
	}
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "a:1"}}}}
	out, _, err := inject.Inject(tmpl, r)
	require.NoError(t, err)
	other := config.Default()
	other.Identity.TrustDomain = "example.org"
	again, _, err := inject.Inject(out, render(t, other)) // strips out's injection first
	require.NoError(t, err)
	removed, _, err := inject.Remove(again)
	require.NoError(t, err)
	removed.Spec.Containers[0].VolumeMounts = append(removed.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "x", MountPath: "/x"})
	_, _, err = inject.Remove(out)
	require.NoError(t, err)
	require.Equal(t, want.InitContainers, r.InitContainers)
}

// The lean injection (status v4, issue 15) adds nothing that no program reads: proxy-init mounts
// the shared volume only to write spiffe-helper's helper.conf, the identity volume projects the
// pod's name only when the hostname is not that name (kagenti-authbridge takes the hostname
// otherwise), the authbridge container has no liveness probe, and user containers get the trace
// mount but no variable naming it.
func TestLeanInjection(t *testing.T) {
	for _, tc := range []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		spec        corev1.PodSpec
		shared      bool // proxy-init mounts the shared volume
		podName     bool // the identity volume projects POD_NAME
	}{
		{name: "default"},
		{name: "spiffe", labels: map[string]string{inject.LabelSpiffe: "enabled"}, shared: true},
		{name: "spiffe, no proxies", labels: map[string]string{inject.LabelSpiffe: "enabled"},
			annotations: map[string]string{inject.AnnotationExcludeComponents: "auth-proxy,envoy-proxy"}, shared: true},
		{name: "hostname", spec: corev1.PodSpec{Hostname: "weather"}, podName: true},
		{name: "setHostnameAsFQDN", spec: corev1.PodSpec{SetHostnameAsFQDN: ptr.To(true)}, podName: true},
		{name: "setHostnameAsFQDN false", spec: corev1.PodSpec{SetHostnameAsFQDN: ptr.To(false)}},
		{name: "subdomain only (the hostname stays the pod's name)", spec: corev1.PodSpec{Subdomain: "agents"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := &corev1.PodTemplateSpec{Spec: tc.spec}
			tmpl.Spec.Containers = []corev1.Container{{Name: "agent", Image: "a:1"}}
			o, err := inject.ParseOptions("weather-agent", tc.labels, tc.annotations)
			require.NoError(t, err)
			o.ReadTemplate(tmpl)
			out, _, err := inject.Inject(tmpl, renderOptions(t, config.Default(), o))
			require.NoError(t, err)

			var proxyInit, authbridge *corev1.Container
			for i, c := range out.Spec.InitContainers {
				switch c.Name {
				case config.ProxyInit:
					proxyInit = &out.Spec.InitContainers[i]
				case config.Authbridge:
					authbridge = &out.Spec.InitContainers[i]
				}
			}
			require.NotNil(t, proxyInit)
			shared := slices.ContainsFunc(proxyInit.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == inject.VolumeShared })
			require.Equal(t, tc.shared, shared, "proxy-init mounts %s", inject.VolumeShared)
			require.Equal(t, []corev1.VolumeMount{{Name: inject.VolumeIdentity, MountPath: inject.PathIdentity}}, proxyInit.VolumeMounts[:1])
			if authbridge != nil {
				require.Nil(t, authbridge.LivenessProbe, "no liveness probe on the authbridge container")
				require.NotNil(t, authbridge.StartupProbe)
				require.NotNil(t, authbridge.ReadinessProbe)
			}

			i := slices.IndexFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == inject.VolumeIdentity })
			require.GreaterOrEqual(t, i, 0)
			p := out.Spec.Volumes[i].Projected
			require.NotNil(t, p, "the identity volume is projected")
			require.Len(t, p.Sources, 2)
			var files []string
			for _, item := range p.Sources[0].DownwardAPI.Items {
				files = append(files, item.Path)
			}
			want := []string{contract.IdentityDefaultsFile, contract.IdentityPodNamespaceFile}
			if tc.podName {
				want = []string{contract.IdentityDefaultsFile, contract.IdentityPodNameFile, contract.IdentityPodNamespaceFile}
			}
			require.Equal(t, want, files)
			require.Equal(t, configmap.TokenExchangeName("weather-agent"), p.Sources[1].ConfigMap.Name, "the TokenExchange ConfigMap beside the defaults")
			require.True(t, *p.Sources[1].ConfigMap.Optional)
			require.False(t, slices.ContainsFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == contract.VolumeTokenExchange }))

			agent := out.Spec.Containers[0]
			require.Empty(t, agent.Env, "no variable is added to a user container")
			require.Equal(t, []corev1.VolumeMount{{Name: inject.VolumeTrace, MountPath: inject.PathTrace}}, agent.VolumeMounts)
		})
	}
}

func renderOptions(t *testing.T, cfg *config.Config, o inject.Options) *inject.Rendered {
	t.Helper()
	r, err := inject.Render(cfg, o)
	require.NoError(t, err)
	return r
}

// TestAuthbridgeMountsTheTraceConfiguration: the authbridge container, whose inbound and
// outbound roles export spans where the workload's AgentTrace points, mounts the kagenti-trace
// volume (the optional configMap {workload}-trace, read-only as every configMap volume) at the
// contract's path; a container running register alone does not; removal takes it away with the
// container.
func TestAuthbridgeMountsTheTraceConfiguration(t *testing.T) {
	authbridge := func(out *corev1.PodTemplateSpec) *corev1.Container {
		for _, c := range slices.Concat(out.Spec.InitContainers, out.Spec.Containers) {
			if c.Name == config.Authbridge {
				return &c
			}
		}
		return nil
	}
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "a:1"}}}}
	for exclude, want := range map[string]bool{
		"":                        true,
		config.ClientRegistration: true,
		config.AuthProxy:          true, // outbound still exports
		config.AuthProxy + "," + config.EnvoyProxy: false,
	} {
		t.Run("exclude="+exclude, func(t *testing.T) {
			var annotations map[string]string
			if exclude != "" {
				annotations = map[string]string{inject.AnnotationExcludeComponents: exclude}
			}
			o, err := inject.ParseOptions("weather-agent", nil, annotations)
			require.NoError(t, err)
			r, err := inject.Render(config.Default(), o)
			require.NoError(t, err)
			out, _, err := inject.Inject(tmpl.DeepCopy(), r)
			require.NoError(t, err)
			c := authbridge(out)
			require.NotNil(t, c)
			i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == inject.VolumeTrace })
			if !want {
				require.Equal(t, -1, i, "register alone exports no span")
				return
			}
			require.NotEqual(t, -1, i, "the authbridge container mounts the trace configuration")
			require.Equal(t, contract.PathTrace, c.VolumeMounts[i].MountPath)
			v := out.Spec.Volumes[slices.IndexFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == inject.VolumeTrace })]
			require.NotNil(t, v.ConfigMap, "a configMap volume: the kubelet mounts it read-only")
			require.Equal(t, configmap.TraceName("weather-agent"), v.ConfigMap.Name)
			require.True(t, *v.ConfigMap.Optional, "no AgentTrace: an empty directory, tracing off")

			removed, _, err := inject.Remove(out)
			require.NoError(t, err)
			require.Equal(t, tmpl, removed, "removal leaves no trace mount")
		})
	}
	t.Run("classic", func(t *testing.T) {
		cfg := config.Default()
		cfg.SidecarMode = config.SidecarClassic
		out, _, err := inject.Inject(tmpl.DeepCopy(), render(t, cfg))
		require.NoError(t, err)
		require.NotNil(t, authbridge(out))
		st, err := inject.ReadStatus(out)
		require.NoError(t, err)
		require.Empty(t, st.OwnTraceMount, "the injected container's trace mount is no mount of the user's")
		removed, _, err := inject.Remove(out)
		require.NoError(t, err)
		require.Equal(t, tmpl, removed)
	})
}
