package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kagenti/platform/injector/internal/config"
)

func TestParseEmptyIsDefault(t *testing.T) {
	c, err := config.Parse(nil)
	require.NoError(t, err)
	require.Equal(t, config.Default(), c)
	require.NoError(t, config.Default().Validate())
}

func TestParseMergesOneComponent(t *testing.T) {
	c, err := config.Parse([]byte(`
sidecarMode: classic
components:
  envoy-proxy:
    image: docker.io/envoyproxy/envoy@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
spireSocket:
  type: hostPath
identity:
  realm: agents
`))
	require.NoError(t, err)
	require.Equal(t, config.SidecarClassic, c.SidecarMode)
	require.Contains(t, c.Components[config.EnvoyProxy].Image, "@sha256:")
	require.Contains(t, c.Components[config.EnvoyProxy].Resources.Limits, corev1.ResourceMemory, "unset fields of a component keep their default")
	require.Equal(t, config.Default().Components[config.AuthProxy], c.Components[config.AuthProxy])
	require.Equal(t, "agents", c.Identity.Realm)
	require.Equal(t, "cluster.local", c.Identity.TrustDomain)
	require.Equal(t, "/run/spire/agent-sockets", c.SpireSocket.HostPath)
	require.NotEqual(t, config.Default().Hash(), c.Hash())
}

func TestParseInvalid(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"unknown field":     {"sidecarMod: native", `unknown field "sidecarMod"`},
		"mode":              {"sidecarMode: sometimes", `sidecarMode: "sometimes" is not one of native, classic`},
		"latest":            {"components: {auth-proxy: {image: 'ghcr.io/x/auth-proxy:latest'}}", "components.auth-proxy.image"},
		"untagged":          {"components: {auth-proxy: {image: 'ghcr.io/x/auth-proxy'}}", "is not pinned"},
		"registry port":     {"components: {auth-proxy: {image: 'localhost:5000/auth-proxy'}}", "is not pinned"},
		"unknown component": {"components: {envoy: {image: 'e:1'}}", "components.envoy: unknown component"},
		"socket type":       {"spireSocket: {type: nfs}", `spireSocket.type: "nfs"`},
		"port":              {"identity: {outboundPort: 0}", "identity.outboundPort: 0 is not a port"},
		"root proxy uid":    {"identity: {proxyUID: 0}", "identity.proxyUID"},
		"not yaml":          {"components: [", "parsing config.yaml"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml))
			require.ErrorContains(t, err, tc.want)
		})
	}
}
