package inject_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
)

// A user container whose effective UID is the proxy UID would have its connections let through by the
// interception rules (no token exchange), and one in the proxy group reads the sidecars' credentials:
// both are refused, naming the field of the template that sets the value; the injected containers,
// and the user's own version of one, are exempt.
func TestInjectRefusesTheProxyIdentityInUserContainers(t *testing.T) {
	uid := func(u int64) *corev1.SecurityContext { return &corev1.SecurityContext{RunAsUser: ptr.To(u)} }
	gid := func(g int64) *corev1.SecurityContext { return &corev1.SecurityContext{RunAsGroup: ptr.To(g)} }
	tmpl := func(pod *corev1.PodSecurityContext, inits []corev1.Container, containers ...corev1.Container) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{SecurityContext: pod, InitContainers: inits, Containers: containers}}
	}
	agent := func(sc *corev1.SecurityContext) corev1.Container {
		return corev1.Container{Name: "agent", Image: "a:1", SecurityContext: sc}
	}
	tool := corev1.Container{Name: "tool", Image: "t:1", SecurityContext: uid(1000)}
	moved := config.Default()
	moved.Identity.ProxyUID = 2000
	for _, tc := range []struct {
		name        string
		cfg         *config.Config
		annotations map[string]string
		tmpl        *corev1.PodTemplateSpec
		want        string // "" when admitted
	}{
		{"a container running as the proxy UID", nil, nil, tmpl(nil, nil, tool, agent(uid(1337))),
			`spec.containers[1].securityContext.runAsUser: invalid value 1337: container "agent" would run as the proxy UID (identity.proxyUID of the injector configuration)`},
		{"an init container running as the proxy UID", nil, nil, tmpl(nil, []corev1.Container{{Name: "setup", Image: "s:1", SecurityContext: uid(1337)}}, agent(nil)),
			`spec.initContainers[0].securityContext.runAsUser: invalid value 1337: container "setup" would run as the proxy UID`},
		{"the pod's runAsUser inherited", nil, nil, tmpl(&corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1337)}, nil, tool, agent(nil)),
			`spec.securityContext.runAsUser: invalid value 1337: container "agent", which sets no runAsUser of its own, would run as the proxy UID`},
		{"the pod's runAsUser overridden by every container", nil, nil, tmpl(&corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1337)}, nil, tool, agent(uid(1001))), ""},
		{"a container in the proxy group", nil, nil, tmpl(nil, nil, agent(gid(1337))),
			`spec.containers[0].securityContext.runAsGroup: invalid value 1337: container "agent" would run in the proxy group`},
		{"the pod's runAsGroup inherited", nil, nil, tmpl(&corev1.PodSecurityContext{RunAsGroup: ptr.To[int64](1337)}, nil, agent(uid(1001))),
			`spec.securityContext.runAsGroup: invalid value 1337: container "agent", which sets no runAsGroup of its own, would run in the proxy group`},
		{"a supplemental group", nil, nil, tmpl(&corev1.PodSecurityContext{SupplementalGroups: []int64{2000, 1337}}, nil, agent(nil)),
			`spec.securityContext.supplementalGroups[1]: invalid value 1337: every container of the pod, container "agent" included, would run in the proxy group`},
		{"fsGroup", nil, nil, tmpl(&corev1.PodSecurityContext{FSGroup: ptr.To[int64](1337)}, nil, agent(nil)),
			`spec.securityContext.fsGroup: invalid value 1337: every container of the pod, container "agent" included, would run in the proxy group`},
		{"another UID and group", nil, nil, tmpl(&corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000), FSGroup: ptr.To[int64](2000)}, nil, agent(nil)), ""},
		{"the configured proxy UID, not 1337", moved, nil, tmpl(nil, nil, agent(uid(1337))), ""},
		{"the configured proxy UID refused", moved, nil, tmpl(nil, nil, agent(uid(2000))), `spec.containers[0].securityContext.runAsUser: invalid value 2000`},
		{"the user's own authbridge runs as the proxy UID", nil, nil, tmpl(nil, nil, agent(nil), corev1.Container{Name: config.Authbridge, Image: "mine:1", SecurityContext: uid(1337)}), ""},
		{"nothing injected, nothing reserved", nil, map[string]string{inject.AnnotationExcludeComponents: "proxy-init,client-registration,auth-proxy,envoy-proxy"},
			tmpl(nil, nil, agent(uid(1337))), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg == nil {
				cfg = config.Default()
			}
			o, err := inject.ParseOptions("w", nil, tc.annotations)
			require.NoError(t, err)
			_, _, err = inject.Inject(tc.tmpl, renderOptions(t, cfg, o))
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			var clash *inject.ProxyIdentityError
			require.ErrorAs(t, err, &clash)
			require.Contains(t, err.Error(), tc.want)
		})
	}

	t.Run("the injected containers themselves", func(t *testing.T) {
		r := render(t, config.Default())
		out, _, err := inject.Inject(tmpl(nil, nil, agent(uid(1001))), r)
		require.NoError(t, err)
		_, _, err = inject.Inject(out, r)
		require.NoError(t, err, "authbridge runs as the proxy UID and group, spiffe-helper in the group: not the user's")
		out.Spec.Containers[0].SecurityContext = uid(1337)
		_, _, err = inject.Inject(out, r)
		require.ErrorContains(t, err, "spec.containers[0].securityContext.runAsUser: invalid value 1337", "an injected template is checked too")
	})
}
