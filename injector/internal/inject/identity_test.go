package inject_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
)

// identityCase is one configuration and workload whose identity defaults (the annotation
// kagenti.io/identity-defaults, the data plane's defaults.env) are held in
// testdata/identity/<name>.env. tokenexchange's kagenti-authbridge tests resolve each file with the
// data plane's own resolution and compare it with what testdata/identity/v1/<name>.env, the
// complete lines an injector wrote before the data plane had built-in defaults, resolved to.
type identityCase struct {
	name           string
	serviceAccount string
	labels         map[string]string
	annotations    map[string]string
	configure      func(*config.Identity)
}

// everyFieldChanged sets every identity field of the configuration to a value other than its
// default.
func everyFieldChanged(id *config.Identity) {
	*id = config.Identity{
		TrustDomain:          "example.org",
		SocketPath:           "/run/spire/agent-sockets/spire.sock",
		JWTAudience:          "other-agents",
		Provider:             config.ProviderKeycloak,
		IdPURL:               "https://keycloak.example.org",
		Realm:                "agents",
		OIDC:                 config.OIDC{Issuer: "https://idp.example.org", TokenURL: "https://idp.example.org/token", JWKSURL: "https://idp.example.org/keys", RegistrationURL: "https://idp.example.org/register"},
		ClientNameTemplate:   "{{.Namespace}}/{{.ServiceAccount}}",
		IdPCredentialsSecret: "other-credentials",
		TokenExchange:        false,
		InboundPort:          9080,
		TargetPort:           9081,
		OutboundPort:         15001,
		ProxyUID:             2000,
		DefaultAudience:      "other-service",
		JWKSRefreshSeconds:   30,
	}
}

var identityCases = []identityCase{
	{name: "default"},
	{name: "spiffe", serviceAccount: "weather", labels: map[string]string{inject.LabelSpiffe: "enabled"}},
	{name: "every-field", serviceAccount: "weather", labels: map[string]string{inject.LabelSpiffe: "enabled"},
		annotations: map[string]string{inject.AnnotationOutboundExclude: "5432,443", inject.AnnotationInboundExclude: "9090"},
		configure:   everyFieldChanged},
	// An OpenID provider and no Keycloak at all: the Keycloak defaults are unset, not the built-in ones.
	{name: "oidc-only", labels: map[string]string{inject.LabelSpiffe: "enabled"}, configure: func(id *config.Identity) {
		everyFieldChanged(id)
		id.Provider, id.IdPURL, id.Realm, id.TokenExchange = config.ProviderOIDC, "", "", true
	}},
	{name: "no-registration", annotations: map[string]string{inject.AnnotationExcludeComponents: "client-registration"}},
	{name: "no-proxies", labels: map[string]string{inject.LabelSpiffe: "enabled"},
		annotations: map[string]string{inject.AnnotationExcludeComponents: "auth-proxy,envoy-proxy"}},
}

func TestIdentityDefaultsGolden(t *testing.T) {
	for _, tc := range identityCases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			if tc.configure != nil {
				tc.configure(&cfg.Identity)
			}
			require.NoError(t, cfg.Validate())
			o, err := inject.ParseOptions("weather-agent", tc.labels, tc.annotations)
			require.NoError(t, err)
			o.ServiceAccount = tc.serviceAccount
			r, err := inject.Render(cfg, o)
			require.NoError(t, err)
			golden := filepath.Join("testdata", "identity", tc.name+".env")
			if updateGolden {
				require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
				require.NoError(t, os.WriteFile(golden, []byte(r.IdentityDefaults), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "missing golden file; run with UPDATE_GOLDEN=1")
			require.Equal(t, string(want), r.IdentityDefaults, "output differs from %s; run with UPDATE_GOLDEN=1", golden)
		})
	}
}
