package authconfig

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"
)

// seedEnv is the environment the injector gives the identity sidecars with its default
// configuration (docs/architecture.md §5): docs/identity.md lists the same.
func seedEnv() map[string]string {
	return map[string]string{
		"POD_NAME":                "weather-agent-7d9f-abcde",
		"POD_NAMESPACE":           "agents",
		"KAGENTI_SERVICE_ACCOUNT": "agent-sa",
		"KAGENTI_WORKLOAD":        "weather-agent",

		"KAGENTI_SPIFFE_ENABLED":              "true",
		"KAGENTI_TRUST_DOMAIN":                "cluster.local",
		"KAGENTI_SPIFFE_SOCKET":               "/run/spire/agent-sockets/agent.sock",
		"KAGENTI_JWT_AUDIENCE":                "kagenti-agents",
		"KAGENTI_CLIENT_REGISTRATION_ENABLED": "true",
		"KAGENTI_IDP_PROVIDER":                "keycloak",
		"KAGENTI_IDP_URL":                     "http://keycloak.kagenti-system.svc:8080",
		"KAGENTI_REALM":                       "default",
		"KAGENTI_CLIENT_NAME_TEMPLATE":        "{{.Namespace}}/{{.WorkloadName}}",
		"KAGENTI_TOKEN_EXCHANGE":              "true",
		"KAGENTI_INBOUND_ENABLED":             "true",
		"KAGENTI_INBOUND_PORT":                "8080",
		"KAGENTI_TARGET_PORT":                 "8081",
		"KAGENTI_INBOUND_PORTS_EXCLUDE":       "",
		"KAGENTI_OUTBOUND_ENABLED":            "true",
		"KAGENTI_OUTBOUND_PORT":               "15123",
		"KAGENTI_PROXY_UID":                   "1337",
		"KAGENTI_OUTBOUND_PORTS_EXCLUDE":      "5432",
		"KAGENTI_DEFAULT_AUDIENCE":            "downstream-service",
	}
}

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func resolveEnv(t *testing.T, env map[string]string, overrides Spec) (Config, error) {
	t.Helper()
	d, err := DefaultsFromEnv(lookup(env))
	require.NoError(t, err)
	return Resolve(d, overrides, WorkloadFromEnv(lookup(env)))
}

func TestResolveSeedDefaults(t *testing.T) {
	c, err := resolveEnv(t, seedEnv(), Spec{})
	require.NoError(t, err)
	assert.Equal(t, Config{
		Workload: Workload{Namespace: "agents", Name: "weather-agent", PodName: "weather-agent-7d9f-abcde", ServiceAccount: "agent-sa"},
		SpiffeID: "spiffe://cluster.local/ns/agents/sa/agent-sa",
		Spiffe:   Spiffe{Enabled: true, TrustDomain: "cluster.local", SocketPath: "/run/spire/agent-sockets/agent.sock", OutputFormat: "jwt", Audience: "kagenti-agents"},
		IdP: IdP{
			Provider: "keycloak", KeycloakURL: "http://keycloak.kagenti-system.svc:8080", Realm: "default",
			Issuer:   "http://keycloak.kagenti-system.svc:8080/realms/default",
			TokenURL: "http://keycloak.kagenti-system.svc:8080/realms/default/protocol/openid-connect/token",
			JWKSURL:  "http://keycloak.kagenti-system.svc:8080/realms/default/protocol/openid-connect/certs",
		},
		ClientRegistration: ClientRegistration{Enabled: true, ClientAuthentication: ClientAuthClientSecret, ClientNameTemplate: "{{.Namespace}}/{{.WorkloadName}}", ClientName: "agents/weather-agent", TokenExchangeEnabled: true},
		Inbound: Inbound{Enabled: true, Port: 8080, TargetPort: 8081, ExcludePorts: []int32{}, Validation: Validation{
			Enabled: true, Issuer: "http://keycloak.kagenti-system.svc:8080/realms/default",
			JWKSURL:  "http://keycloak.kagenti-system.svc:8080/realms/default/protocol/openid-connect/certs",
			Audience: "spiffe://cluster.local/ns/agents/sa/agent-sa", RequiredScopes: []string{}, JWKSRefreshSeconds: 600,
		}, Authorization: Authorization{Rules: []AuthorizationRule{}, Default: "Allow", MaxChainDepth: 8}},
		Outbound: Outbound{
			Enabled:      true,
			Interception: Interception{Enabled: true, ProxyPort: 15123, ProxyUID: 1337, ExcludePorts: []int32{5432}},
			TokenExchange: TokenExchange{
				Enabled:       true,
				TokenURL:      "http://keycloak.kagenti-system.svc:8080/realms/default/protocol/openid-connect/token",
				Delegation:    DelegationImmediateCaller,
				DefaultTarget: Target{Audience: "downstream-service", Scopes: []string{}},
				Routes:        []Route{},
			},
			Egress: Egress{Default: "Allow", Allow: []EgressAllow{}},
		},
		MTLS: MTLS{Mode: MTLSOff},
	}, c)
}

func TestResolveOverridesFollowTheIdP(t *testing.T) {
	// A TokenExchange that moves the workload to another Keycloak moves every derived endpoint
	// with it, and keeps the ones it sets itself.
	over, err := Parse([]byte(`
clientRegistration:
  keycloak: {url: "https://kc.example.com/", realm: prod}
inbound:
  validation: {issuer: "https://login.example.com/realms/prod", audience: self, requiredScopes: [agent:invoke]}
outbound:
  trafficInterception: {excludePorts: [9901, 5432]}
  tokenExchange:
    defaultTarget: {scopes: [downstream:access]}
    destinationRules:
    - match: {host: "api.example.com:443"}
      target: {audience: api}
    - match: {host: "*.googleapis.com"}
`))
	require.NoError(t, err)
	c, err := resolveEnv(t, seedEnv(), over)
	require.NoError(t, err)
	assert.Equal(t, "https://kc.example.com/realms/prod/protocol/openid-connect/token", c.Outbound.TokenExchange.TokenURL)
	assert.Equal(t, "https://kc.example.com/realms/prod/protocol/openid-connect/certs", c.Inbound.Validation.JWKSURL)
	assert.Equal(t, "https://login.example.com/realms/prod", c.Inbound.Validation.Issuer)
	assert.Equal(t, "spiffe://cluster.local/ns/agents/sa/agent-sa", c.Inbound.Validation.Audience, "self is the SPIFFE ID")
	assert.Equal(t, []int32{5432, 9901}, c.Outbound.Interception.ExcludePorts, "the annotation's exclusions stay")
	assert.Equal(t, Target{Audience: "downstream-service", Scopes: []string{"downstream:access"}}, c.Outbound.TokenExchange.DefaultTarget,
		"a default target that sets only scopes keeps the default audience")
	assert.Equal(t, []Route{
		{Host: "api.example.com:443", Target: Target{Audience: "api", Scopes: []string{"downstream:access"}}},
		{Host: "*.googleapis.com", Passthrough: true, Target: Target{Scopes: []string{}}},
	}, c.Outbound.TokenExchange.Routes)
}

func TestResolveOIDCProvider(t *testing.T) {
	env := seedEnv()
	env["KAGENTI_IDP_PROVIDER"] = "oidc"
	env["KAGENTI_OIDC_ISSUER"] = "http://127.0.0.1:9000"
	env["KAGENTI_OIDC_TOKEN_URL"] = "http://127.0.0.1:9000/oauth/token"
	env["KAGENTI_OIDC_JWKS_URL"] = "http://127.0.0.1:9000/keys"
	env["KAGENTI_OIDC_REGISTRATION_URL"] = "http://127.0.0.1:9000/register"
	c, err := resolveEnv(t, env, Spec{})
	require.NoError(t, err)
	assert.Equal(t, IdP{Provider: "oidc", Issuer: "http://127.0.0.1:9000", TokenURL: "http://127.0.0.1:9000/oauth/token",
		JWKSURL: "http://127.0.0.1:9000/keys", RegistrationURL: "http://127.0.0.1:9000/register"}, c.IdP)
	assert.Equal(t, "http://127.0.0.1:9000", c.Inbound.Validation.Issuer)
	assert.Equal(t, "http://127.0.0.1:9000/oauth/token", c.Outbound.TokenExchange.TokenURL)
}

// clientAuthentication jwtSVID resolves with the controller's client ID, and is refused, with
// the field's path, where it cannot work: without SPIFFE, with Keycloak, or misspelt.
func TestResolveClientAuthentication(t *testing.T) {
	env := seedEnv()
	env["KAGENTI_IDP_PROVIDER"] = "oidc"
	env["KAGENTI_OIDC_ISSUER"] = "http://127.0.0.1:9000"
	env["KAGENTI_OIDC_TOKEN_URL"] = "http://127.0.0.1:9000/oauth/token"
	env["KAGENTI_OIDC_JWKS_URL"] = "http://127.0.0.1:9000/keys"
	env["KAGENTI_OIDC_REGISTRATION_URL"] = "http://127.0.0.1:9000/register"
	c, err := resolveEnv(t, env, Spec{ClientRegistration: &ClientRegistrationSpec{ClientAuthentication: ClientAuthJWTSVID, ClientID: "dyn-1"}})
	require.NoError(t, err)
	assert.Equal(t, ClientAuthJWTSVID, c.ClientRegistration.ClientAuthentication)
	assert.Equal(t, "dyn-1", c.ClientRegistration.ClientID)

	_, err = resolveEnv(t, env, Spec{Spiffe: &SpiffeSpec{Enabled: ptr.To(false)}, ClientRegistration: &ClientRegistrationSpec{ClientAuthentication: ClientAuthJWTSVID}})
	assert.ErrorContains(t, err, "clientRegistration.clientAuthentication: jwtSVID needs SPIFFE")
	_, err = resolveEnv(t, seedEnv(), Spec{ClientRegistration: &ClientRegistrationSpec{ClientAuthentication: ClientAuthJWTSVID}})
	assert.ErrorContains(t, err, `clientRegistration.clientAuthentication: jwtSVID needs provider oidc (RFC 7591 registration by kagenti-tokenexchange), not "keycloak"`)
	_, err = resolveEnv(t, env, Spec{ClientRegistration: &ClientRegistrationSpec{ClientAuthentication: "mtls"}})
	assert.ErrorContains(t, err, `clientRegistration.clientAuthentication: "mtls" is not clientSecret or jwtSVID`)
}

func TestResolveReportsEveryProblemWithItsPath(t *testing.T) {
	env := seedEnv()
	delete(env, "KAGENTI_IDP_URL")
	over := Spec{
		Spiffe:  &SpiffeSpec{OutputFormat: "pem", TrustDomain: "Bad Domain"},
		Inbound: &InboundSpec{Port: ptr.To[int32](8081), Validation: &ValidationSpec{RequiredScopes: []string{"two words"}}},
		Outbound: &OutboundSpec{
			TrafficInterception: &TrafficInterceptionSpec{ProxyPort: ptr.To[int32](8081), ProxyUID: ptr.To[int64](0)},
			TokenExchange: &TokenExchangeSpec{DestinationRules: []DestinationRule{
				{Match: DestinationMatch{Host: "a.example.com"}}, {Match: DestinationMatch{Host: "a.example.com"}}, {Match: DestinationMatch{Host: "http://x"}},
			}},
		},
		ClientRegistration: &ClientRegistrationSpec{Keycloak: &KeycloakSpec{ClientNameTemplate: "{{.Secret}}"}},
	}
	_, err := resolveEnv(t, env, over)
	require.Error(t, err)
	for _, want := range []string{
		`spiffe.outputFormat: "pem" is not supported: only jwt`,
		`spiffe.trustDomain: "Bad Domain" is not a trust domain`,
		"clientRegistration.keycloak.url: required (not set in config.yaml, and the default KAGENTI_IDP_URL is not set)",
		"inbound.targetPort: must differ from inbound.port (8081)",
		"inbound.validation.issuer: required (not set in config.yaml, and the default derived from KAGENTI_IDP_URL and KAGENTI_REALM (Keycloak) or KAGENTI_OIDC_ISSUER is not set)",
		`inbound.validation.requiredScopes[0]: "two words" is not an OAuth scope token`,
		"outbound.trafficInterception.proxyPort: must differ from inbound.port (8081)",
		"outbound.trafficInterception.proxyUid: 0 must be a non-root UID",
		`outbound.tokenExchange.destinationRules[1].match.host: "a.example.com" repeats destinationRules[0]`,
		`outbound.tokenExchange.destinationRules[2].match.host: "http://x" is not a host pattern`,
		`clientRegistration.keycloak.clientNameTemplate: "{{.Secret}}" at offset 0: unknown variable .Secret`,
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestFieldsWithoutEffectAreRejected: what config.yaml cannot make happen is an error naming the
// field, never a value the roles silently ignore.
func TestFieldsWithoutEffectAreRejected(t *testing.T) {
	t.Run("proxyUid is not part of config.yaml", func(t *testing.T) {
		_, err := Parse([]byte("outbound: {trafficInterception: {proxyUid: 1000}}\n"))
		assert.ErrorContains(t, err, `unknown field "proxyUid"`)
		c, err := resolveEnv(t, seedEnv(), Spec{})
		require.NoError(t, err)
		assert.Equal(t, int64(1337), c.Outbound.Interception.ProxyUID, "the injector's KAGENTI_PROXY_UID")
		assert.NotContains(t, string(Marshal(Merge(Spec{}, Spec{Outbound: &OutboundSpec{TrafficInterception: &TrafficInterceptionSpec{ProxyUID: new(int64(5))}}}))), "proxyUid")
	})
	t.Run("adminCredentialsSecret is not part of config.yaml", func(t *testing.T) {
		_, err := Parse([]byte("clientRegistration: {keycloak: {adminCredentialsSecret: kc}}\n"))
		assert.ErrorContains(t, err, `unknown field "adminCredentialsSecret"`)
	})
	t.Run("x509", func(t *testing.T) {
		_, err := resolveEnv(t, seedEnv(), Spec{Spiffe: &SpiffeSpec{OutputFormat: "x509"}})
		assert.ErrorContains(t, err, `spiffe.outputFormat: "x509" is not supported: only jwt (no container reads X.509 SVID files)`)
	})
	t.Run("socket directory", func(t *testing.T) {
		for path, want := range map[string]bool{
			"/run/spire/agent-sockets/agent.sock": true, "/run/spire/agent-sockets/sub/api.sock": true,
			"/var/run/agent.sock": false, "/run/spire/agent-sockets/../agent.sock": false, "/run/spire/agent-sockets/": false,
		} {
			assert.Equal(t, want, InSpireSocketDir(path), path)
		}
	})
	for _, tc := range []struct{ env, container, yaml string }{
		{"KAGENTI_SPIFFE_ENABLED", "spiffe-helper", "spiffe: {enabled: true}"},
		{"KAGENTI_CLIENT_REGISTRATION_ENABLED", "client-registration", "clientRegistration: {enabled: true}"},
		{"KAGENTI_INBOUND_ENABLED", "auth-proxy", "inbound: {enabled: true}"},
		{"KAGENTI_OUTBOUND_ENABLED", "envoy-proxy", "outbound: {enabled: true}"},
	} {
		t.Run(tc.yaml+" without "+tc.container, func(t *testing.T) {
			env := seedEnv()
			env[tc.env] = "false"
			over, err := Parse([]byte(tc.yaml))
			require.NoError(t, err)
			_, err = resolveEnv(t, env, over)
			assert.ErrorContains(t, err, "true cannot take effect: the injector did not put "+tc.container+" into this pod ("+tc.env+"=false)")
			_, err = resolveEnv(t, env, Spec{})
			require.NoError(t, err, "left out, the part stays off")
			_, err = resolveEnv(t, seedEnv(), over)
			require.NoError(t, err, "true where the container is injected is the default")
		})
	}
}

// TestInboundEnabledTakesEffect: inbound.enabled false switches validation off at run time, and
// the inbound redirect at the next pod start (a startup setting, reported until then).
func TestInboundEnabledTakesEffect(t *testing.T) {
	started, err := resolveEnv(t, seedEnv(), Spec{})
	require.NoError(t, err)
	next, err := resolveEnv(t, seedEnv(), Spec{Inbound: &InboundSpec{Enabled: new(false)}})
	require.NoError(t, err)
	assert.False(t, next.Inbound.Enabled)
	assert.Equal(t, []string{"inbound.enabled"}, PendingRestart(started, next))
	assert.False(t, next.WithStartupSettingsOf(started).Inbound.Enabled, "the run-time half applies at once")
}

func TestResolveChecksOnlyWhatIsEnabled(t *testing.T) {
	env := seedEnv()
	for _, k := range []string{"KAGENTI_IDP_URL", "KAGENTI_REALM", "KAGENTI_JWT_AUDIENCE", "KAGENTI_SPIFFE_SOCKET", "KAGENTI_CLIENT_NAME_TEMPLATE"} {
		delete(env, k)
	}
	_, err := resolveEnv(t, env, Spec{})
	require.Error(t, err)

	off := false
	_, err = resolveEnv(t, env, Spec{
		Spiffe:             &SpiffeSpec{Enabled: &off},
		ClientRegistration: &ClientRegistrationSpec{Enabled: &off, Provider: ProviderOIDC},
		Inbound:            &InboundSpec{Validation: &ValidationSpec{Enabled: &off}},
		Outbound:           &OutboundSpec{TokenExchange: &TokenExchangeSpec{Enabled: &off}},
	})
	assert.NoError(t, err, "nothing that is switched off needs an identity provider")
}

func TestDefaultsFromEnvRejectsMalformedValues(t *testing.T) {
	env := map[string]string{"KAGENTI_INBOUND_PORT": "80a", "KAGENTI_SPIFFE_ENABLED": "yes please", "KAGENTI_OUTBOUND_PORTS_EXCLUDE": "1, 70000"}
	_, err := DefaultsFromEnv(lookup(env))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `environment variable KAGENTI_INBOUND_PORT (inbound.port): "80a" is not a port`)
	assert.Contains(t, err.Error(), `environment variable KAGENTI_SPIFFE_ENABLED (spiffe.enabled): "yes please" is not true or false`)
	assert.Contains(t, err.Error(), `environment variable KAGENTI_OUTBOUND_PORTS_EXCLUDE (outbound.trafficInterception.excludePorts): "70000" is not a port`)
}

func TestPendingRestart(t *testing.T) {
	started, err := resolveEnv(t, seedEnv(), Spec{})
	require.NoError(t, err)
	next, err := resolveEnv(t, seedEnv(), Spec{
		Inbound:  &InboundSpec{Validation: &ValidationSpec{RequiredScopes: []string{"x"}}},
		Outbound: &OutboundSpec{TrafficInterception: &TrafficInterceptionSpec{ProxyPort: ptr.To[int32](15001), ExcludePorts: []int32{9901}}},
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"outbound.trafficInterception.proxyPort", "outbound.trafficInterception.excludePorts"}, PendingRestart(started, next))

	running := next.WithStartupSettingsOf(started)
	assert.Equal(t, int32(15123), running.Outbound.Interception.ProxyPort, "the proxy keeps the port traffic is redirected to")
	assert.Equal(t, []string{"x"}, running.Inbound.Validation.RequiredScopes, "run-time settings apply at once")
	assert.Empty(t, PendingRestart(started, running))
}

// A pod whose template names no service account runs as "default"; the injector leaves
// KAGENTI_SERVICE_ACCOUNT out then, and the SPIFFE ID must still be the pod's.
func TestWorkloadWithoutServiceAccountIsDefault(t *testing.T) {
	env := map[string]string{EnvPodNamespace: "agents", EnvWorkload: "weather-agent", EnvPodName: "weather-agent-0"}
	w := WorkloadFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.Equal(t, "default", w.ServiceAccount)
	require.Equal(t, "spiffe://cluster.local/ns/agents/sa/default", w.SpiffeID("cluster.local"))
	env[EnvServiceAccount] = "weather"
	require.Equal(t, "weather", WorkloadFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }).ServiceAccount)
}

// The pod's name is POD_NAME when given (the environment or the identity volume, which projects it
// only when the hostname is not the pod's name), else the hostname.
func TestPodNameOrHostname(t *testing.T) {
	hostname := func() (string, error) { return "weather-agent-7d9f-abcde", nil }
	w, from := PodNameOrHostname(Workload{Namespace: "agents", PodName: "from-env"}, hostname)
	require.Equal(t, "from-env", w.PodName)
	require.Equal(t, PodNameFromEnv, from)

	w, from = PodNameOrHostname(Workload{Namespace: "agents"}, hostname)
	require.Equal(t, Workload{Namespace: "agents", PodName: "weather-agent-7d9f-abcde"}, w)
	require.Equal(t, PodNameFromHostname, from)

	w, from = PodNameOrHostname(Workload{Namespace: "agents"}, func() (string, error) { return "", errors.New("no hostname") })
	require.Empty(t, w.PodName, "Resolve reports it when a client name template needs it")
	require.Empty(t, from)
}

// TestResolveRefusesAClientNameWithoutTheNamespaceFirst: kagenti-authbridge itself refuses a
// client name template that could name another namespace's client (whatever admitted it: a
// TokenExchange stored under an older CRD, or the injector's environment), and registration needs
// the workload's name for the client's owner marker.
func TestResolveRefusesAClientNameWithoutTheNamespaceFirst(t *testing.T) {
	for _, tmpl := range []string{"team-b/agent", "agent-{{.PodName}}", "{{.WorkloadName}}-{{.Namespace}}"} {
		_, err := resolveEnv(t, seedEnv(), Spec{ClientRegistration: &ClientRegistrationSpec{Keycloak: &KeycloakSpec{ClientNameTemplate: tmpl}}})
		assert.ErrorContains(t, err, `clientRegistration.keycloak.clientNameTemplate: "`+tmpl+`" must start with {{.Namespace}} followed by '/'`)
	}
	env := seedEnv()
	env["KAGENTI_CLIENT_NAME_TEMPLATE"] = "shared-client"
	_, err := resolveEnv(t, env, Spec{})
	assert.ErrorContains(t, err, `clientRegistration.keycloak.clientNameTemplate: "shared-client" must start with {{.Namespace}}`)

	env = seedEnv()
	delete(env, "KAGENTI_WORKLOAD")
	_, err = resolveEnv(t, env, Spec{ClientRegistration: &ClientRegistrationSpec{Keycloak: &KeycloakSpec{ClientNameTemplate: "{{.Namespace}}/{{.PodName}}"}}})
	assert.ErrorContains(t, err, "workload.name: required by client registration, for the client's name and its owner marker (environment variable KAGENTI_WORKLOAD)")

	_, err = resolveEnv(t, seedEnv(), Spec{ClientRegistration: &ClientRegistrationSpec{Keycloak: &KeycloakSpec{ClientNameTemplate: "{{ .Namespace }}/{{.ServiceAccount}}"}}})
	assert.NoError(t, err)
}

// The policy resolves with its default made explicit (Deny as soon as a rule allows) and the
// chain depth filled in; a policy the proxy could not run is refused with the configuration,
// each problem with its path in config.yaml.
func TestResolveAuthorization(t *testing.T) {
	parse := func(y string) Spec {
		s, err := Parse([]byte(y))
		require.NoError(t, err)
		return s
	}
	c, err := resolveEnv(t, seedEnv(), parse(`inbound: {authorization: {rules: [{name: only-middle, effect: Allow, when: 'caller == "m"'}]}}`))
	require.NoError(t, err)
	assert.Equal(t, Authorization{Rules: []AuthorizationRule{{Name: "only-middle", Effect: "Allow", When: `caller == "m"`}}, Default: "Deny", MaxChainDepth: 8}, c.Inbound.Authorization)

	c, err = resolveEnv(t, seedEnv(), parse(`inbound: {authorization: {rules: [{name: no-bob, effect: Deny, when: 'subject == "bob"'}], dryRun: true, maxChainDepth: 3}}`))
	require.NoError(t, err)
	assert.Equal(t, Authorization{Rules: []AuthorizationRule{{Name: "no-bob", Effect: "Deny", When: `subject == "bob"`}}, Default: "Allow", DryRun: true, MaxChainDepth: 3}, c.Inbound.Authorization)

	_, err = resolveEnv(t, seedEnv(), parse(`inbound: {authorization: {default: allow, maxChainDepth: 17, rules: [
  {name: a, effect: Allow, when: "true"},
  {name: a, effect: Allow, when: "true"},
  {name: c, effect: Allow, when: "subjekt == 'x'"}]}}`))
	require.Error(t, err)
	for _, want := range []string{
		`inbound.authorization.default: "allow" is not Allow or Deny`,
		"inbound.authorization.maxChainDepth: 17 is not 1 to 16",
		`inbound.authorization.rules[1].name: rule "a" repeats the name of rules[0]`,
		`inbound.authorization.rules[2].when: rule "c" does not compile: 1:1: undeclared reference to 'subjekt'`,
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestAllowScopeEscalationIsInheritedFromTheDefaultTarget: a rule's target takes defaultTarget's
// allowScopeEscalation unless it sets its own; it is off when nobody sets it.
func TestAllowScopeEscalationIsInheritedFromTheDefaultTarget(t *testing.T) {
	over, err := Parse([]byte(`
outbound:
  tokenExchange:
    defaultTarget: {audience: fallback, allowScopeEscalation: true}
    destinationRules:
    - match: {host: inherits.example.com}
      target: {audience: a}
    - match: {host: narrows.example.com}
      target: {audience: b, allowScopeEscalation: false}
`))
	require.NoError(t, err)
	c, err := resolveEnv(t, seedEnv(), over)
	require.NoError(t, err)
	tx := c.Outbound.TokenExchange
	assert.True(t, tx.DefaultTarget.AllowScopeEscalation)
	assert.True(t, tx.Routes[0].Target.AllowScopeEscalation, "inherited from defaultTarget")
	assert.False(t, tx.Routes[1].Target.AllowScopeEscalation, "the rule's own false")

	c, err = resolveEnv(t, seedEnv(), Spec{})
	require.NoError(t, err)
	assert.False(t, c.Outbound.TokenExchange.DefaultTarget.AllowScopeEscalation, "off by default")
}

// TestDelegationIsChainedOrImmediateCaller: outbound.tokenExchange.delegation defaults to
// immediateCaller, takes chained, and anything else is refused naming the field.
func TestDelegationIsChainedOrImmediateCaller(t *testing.T) {
	over, err := Parse([]byte("outbound: {tokenExchange: {delegation: chained}}\n"))
	require.NoError(t, err)
	c, err := resolveEnv(t, seedEnv(), over)
	require.NoError(t, err)
	assert.Equal(t, DelegationChained, c.Outbound.TokenExchange.Delegation)

	over, err = Parse([]byte("outbound: {tokenExchange: {delegation: nested}}\n"))
	require.NoError(t, err)
	_, err = resolveEnv(t, seedEnv(), over)
	assert.ErrorContains(t, err, `outbound.tokenExchange.delegation: "nested" is not chained or immediateCaller`)
}

// The egress policy resolves with its default made explicit (Allow) and an agent rule as its
// Service's four names, in the workload's namespace unless it names another; a policy the proxy
// could not enforce is refused, each problem with its path in config.yaml.
func TestResolveEgress(t *testing.T) {
	parse := func(y string) Spec {
		s, err := Parse([]byte(y))
		require.NoError(t, err)
		return s
	}
	c, err := resolveEnv(t, seedEnv(), parse(`outbound: {egress: {default: Deny, dryRun: true, allow: [
  {host: "API.openai.com", ports: [443]},
  {cidr: 10.96.0.0/12},
  {agent: {name: weather}},
  {agent: {name: search, namespace: tools}, ports: [8080]}]}}`))
	require.NoError(t, err)
	assert.Equal(t, Egress{Default: "Deny", DryRun: true, Allow: []EgressAllow{
		{Hosts: []string{"api.openai.com"}, Ports: []int32{443}},
		{Hosts: []string{}, CIDR: "10.96.0.0/12", Ports: []int32{}},
		{Hosts: []string{"weather", "weather.agents", "weather.agents.svc", "weather.agents.svc.cluster.local"}, Ports: []int32{}},
		{Hosts: []string{"search", "search.tools", "search.tools.svc", "search.tools.svc.cluster.local"}, Ports: []int32{8080}},
	}}, c.Outbound.Egress)

	_, err = resolveEnv(t, seedEnv(), parse(`outbound: {egress: {default: deny, allow: [
  {host: a.example.com, cidr: 10.0.0.0/8},
  {},
  {cidr: 10.0.0.0/33},
  {host: "a b"},
  {host: "a.example.com:443", ports: [443]},
  {agent: {name: Weather, namespace: "x_y"}},
  {cidr: 10.0.0.0/8, ports: [0, 65536]}]}}`))
	require.Error(t, err)
	for _, want := range []string{
		`outbound.egress.default: "deny" is not Allow or Deny`,
		"outbound.egress.allow[0]: exactly one of host, cidr and agent must be set (2 are)",
		"outbound.egress.allow[1]: exactly one of host, cidr and agent must be set (0 are)",
		`outbound.egress.allow[2].cidr: "10.0.0.0/33" is not a CIDR`,
		`outbound.egress.allow[3].host: "a b" is not a host pattern`,
		`outbound.egress.allow[4].ports: a host with :port ("a.example.com:443") and ports together`,
		`outbound.egress.allow[5].agent.name: "Weather" is not a Service name`,
		`outbound.egress.allow[5].agent.namespace: "x_y" is not a namespace name`,
		"outbound.egress.allow[6].ports[0]: 0 is not a port (1-65535)",
		"outbound.egress.allow[6].ports[1]: 65536 is not a port (1-65535)",
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// inbound.authorization.external resolves with the 200ms default timeout, and the data plane
// refuses what the client would (a plaintext remote address, a timeout out of bounds, a CA bundle
// without a certificate), each error naming the field.
func TestResolveExternalAuthorizer(t *testing.T) {
	parse := func(y string) Spec {
		s, err := Parse([]byte(y))
		require.NoError(t, err)
		return s
	}
	c, err := resolveEnv(t, seedEnv(), parse(`inbound: {authorization: {external: {address: "127.0.0.1:9191"}}}`))
	require.NoError(t, err)
	assert.Equal(t, &External{Address: "127.0.0.1:9191", Timeout: 200 * time.Millisecond}, c.Inbound.Authorization.External)

	c, err = resolveEnv(t, seedEnv(), parse(`inbound: {authorization: {external: {address: "unix:///run/opa.sock", timeout: 1s, failOpen: true}}}`))
	require.NoError(t, err)
	assert.Equal(t, &External{Address: "unix:///run/opa.sock", Timeout: time.Second, FailOpen: true}, c.Inbound.Authorization.External)

	_, err = resolveEnv(t, seedEnv(), parse(`inbound: {authorization: {external: {address: "opa.policy.svc:9191", timeout: 9s}}}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `inbound.authorization.external.address: "opa.policy.svc:9191" is not loopback or a unix socket`)
	assert.Contains(t, err.Error(), `inbound.authorization.external.timeout: 9s is not 10ms to 5s`)

	_, err = resolveEnv(t, seedEnv(), parse(`inbound: {authorization: {external: {address: "opa.policy.svc:9191", tls: {caBundle: nope}}}}`))
	require.ErrorContains(t, err, "inbound.authorization.external.tls.caBundle: no PEM certificate")

	_, err = resolveEnv(t, seedEnv(), parse(`inbound: {authorization: {external: {address: "127.0.0.1:9191", timeout: soon}}}`))
	require.ErrorContains(t, err, `inbound.authorization.external.timeout: "soon" is not a duration`)
}
