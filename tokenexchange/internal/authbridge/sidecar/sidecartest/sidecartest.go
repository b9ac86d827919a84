// Package sidecartest builds role configurations for the authbridge roles' tests.
package sidecartest

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// Config is a role configuration on defaults alone (no config.yaml in dir): the workload
// agents/weather (pod weather-abc), SPIFFE, registration through RFC 7591 at an OIDC provider
// whose registration endpoint is registrationURL, the inbound and outbound proxies on their
// default ports.
func Config(t testing.TB, dir, registrationURL string) *sidecar.Config {
	t.Helper()
	p := func(i int32) *int32 { return &i }
	uid := int64(1337)
	cfg, err := sidecar.NewConfig(sidecar.Source{
		Dir:      dir,
		Workload: authconfig.Workload{Namespace: "agents", Name: "weather", PodName: "weather-abc", ServiceAccount: "weather"},
		Defaults: authconfig.Spec{
			Spiffe: &authconfig.SpiffeSpec{TrustDomain: "cluster.local", SocketPath: "/run/spire/agent-sockets/agent.sock", Audience: "a"},
			ClientRegistration: &authconfig.ClientRegistrationSpec{Provider: "oidc",
				OIDC:     &authconfig.OIDCSpec{Issuer: "http://idp", TokenURL: "http://idp/token", JWKSURL: "http://idp/keys", RegistrationURL: registrationURL},
				Keycloak: &authconfig.KeycloakSpec{ClientNameTemplate: "{{.Namespace}}/{{.WorkloadName}}"}},
			Inbound: &authconfig.InboundSpec{Port: p(8080), TargetPort: p(8081)},
			Outbound: &authconfig.OutboundSpec{TrafficInterception: &authconfig.TrafficInterceptionSpec{ProxyPort: p(15123), ProxyUID: &uid},
				TokenExchange: &authconfig.TokenExchangeSpec{DefaultTarget: &authconfig.ExchangeTarget{Audience: "d"}}},
		},
	}, zaptest.NewLogger(t))
	require.NoError(t, err)
	return cfg
}
