package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

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
images:
  authbridge: ghcr.io/kagenti/kagenti-authbridge@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
components:
  authbridge:
    resources: {requests: {cpu: 30m}}
spireSocket:
  type: hostPath
identity:
  realm: agents
`))
	require.NoError(t, err)
	require.Equal(t, config.SidecarClassic, c.SidecarMode)
	require.Contains(t, c.Images.Authbridge, "@sha256:")
	require.Equal(t, config.DefaultSpiffeHelperImage, c.Images.SpiffeHelper, "an image left out keeps its default")
	require.Equal(t, "30m", func() *resource.Quantity {
		q := c.Components[config.Authbridge].Resources.Requests[corev1.ResourceCPU]
		return &q
	}().String())
	require.Equal(t, config.Default().Components[config.ProxyInit], c.Components[config.ProxyInit])
	require.Equal(t, "agents", c.Identity.Realm)
	require.Equal(t, "cluster.local", c.Identity.TrustDomain)
	require.Equal(t, "/run/spire/agent-sockets", c.SpireSocket.HostPath)
	require.NotEqual(t, config.Default().Hash(), c.Hash())
}

func TestParseOIDCProvider(t *testing.T) {
	c, err := config.Parse([]byte(`
identity:
  provider: oidc
  oidc:
    issuer: https://idp.example.com
    tokenURL: https://idp.example.com/token
    jwksURL: https://idp.example.com/keys
    registrationURL: https://idp.example.com/register
`))
	require.NoError(t, err)
	require.Equal(t, config.OIDC{Issuer: "https://idp.example.com", TokenURL: "https://idp.example.com/token",
		JWKSURL: "https://idp.example.com/keys", RegistrationURL: "https://idp.example.com/register"}, c.Identity.OIDC)
	require.Equal(t, config.ProviderKeycloak, config.Default().Identity.Provider)
}

func TestParseInvalid(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"unknown field":     {"sidecarMod: native", `unknown field "sidecarMod"`},
		"mode":              {"sidecarMode: sometimes", `sidecarMode: "sometimes" is not one of native, classic`},
		"latest":            {"images: {authbridge: 'ghcr.io/x/kagenti-authbridge:latest'}", "images.authbridge"},
		"untagged":          {"images: {spiffeHelper: 'ghcr.io/spiffe/spiffe-helper'}", "is not pinned"},
		"registry port":     {"images: {authbridge: 'localhost:5000/kagenti-authbridge'}", "is not pinned"},
		"old image field":   {"components: {auth-proxy: {image: 'ghcr.io/x/auth-proxy:v1'}}", "image"},
		"unknown component": {"components: {envoy: {resources: {}}}", "components.envoy: unknown container; accepted: proxy-init, spiffe-helper, authbridge"},
		// The roles run in one container: their resources of old are refused, not silently dropped.
		"a role's resources": {"components: {envoy-proxy: {resources: {requests: {cpu: 30m}}}}", "components.envoy-proxy: runs in the authbridge container with the other identity roles and has no resources of its own; set components.authbridge instead"},
		"socket scheme":      {"identity: {socketPath: 'unix:///run/spire/agent-sockets/agent.sock'}", "identity.socketPath"},
		"socket elsewhere":   {"identity: {socketPath: '/tmp/agent.sock'}", "spire-agent-socket volume"},
		"multi-line":         {"identity: {realm: \"a\\nb\"}", "identity.realm: must be one line"},
		"socket type":        {"spireSocket: {type: nfs}", `spireSocket.type: "nfs"`},
		"port":               {"identity: {outboundPort: 0}", "identity.outboundPort: 0 is not a port"},
		"root proxy uid":     {"identity: {proxyUID: 0}", "identity.proxyUID"},
		"not yaml":           {"components: [", "parsing config.yaml"},
		"provider":           {"identity: {provider: okta}", `identity.provider: "okta" is not one of keycloak, oidc`},
		"oidc without urls":  {"identity: {provider: oidc, oidc: {issuer: 'https://idp.example.com'}}", "identity.oidc.tokenURL: required for identity.provider oidc"},
		"keycloak url":       {"identity: {idpURL: ''}", "identity.idpURL: required for identity.provider keycloak"},
		"oidc url scheme":    {"identity: {oidc: {jwksURL: 'ftp://idp.example.com/keys'}}", `identity.oidc.jwksURL: "ftp://idp.example.com/keys" must be an http or https URL with a host`},
		"oidc url no host":   {"identity: {oidc: {registrationURL: 'https:///register'}}", "identity.oidc.registrationURL"},
		// Issue 26: a cluster-wide client name without the namespace first lets two namespaces'
		// workloads of the same name share one client.
		"client name without namespace": {"identity: {clientNameTemplate: '{{.WorkloadName}}'}",
			`identity.clientNameTemplate: "{{.WorkloadName}}" must start with {{.Namespace}} followed by '/'`},
		"client name with namespace last": {"identity: {clientNameTemplate: '{{.WorkloadName}}-{{.Namespace}}'}",
			"so that no two namespaces can register clients of the same name"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml))
			require.ErrorContains(t, err, tc.want)
		})
	}
}
