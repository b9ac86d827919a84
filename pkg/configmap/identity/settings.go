package identity

import (
	"fmt"
	"strconv"
	"strings"
)

// Settings is the one table of the identity settings: every field of a TokenExchange's spec
// (besides targetRef) and of the data plane's config.yaml, with the environment variable that
// carries the injector's default for it and the injector's configuration field that default
// comes from. The code acts on it at run time, so adding a setting is a row here plus the code
// that uses the value:
//
//   - the data plane (tokenexchange/internal/authconfig) reads each variable into the field at
//     Path (DefaultsFromEnv) and merges config.yaml over the defaults by each row's Merge rule;
//   - the injector (injector/internal/inject) writes each variable from the field Injector of its
//     configuration, leaving out the lines the data plane would take anyway (Setting.NeedsLine);
//   - docs/identity.md carries the table rendered by MarkdownTable.
//
// Tests hold the Go types to it: the TokenExchange API's spec fields, the data plane's Spec, the
// injector's identity configuration and the docs each have exactly the rows that name them.
//
// Rows that share Env (KAGENTI_TOKEN_EXCHANGE sets two fields) are written once, at the first.
// The rows with a variable are in the order the injector writes the lines (the goldens' order).
var Settings = []Setting{
	{Path: "spiffe.trustDomain", Kind: String, Env: "KAGENTI_TRUST_DOMAIN", BuiltIn: TrustDomain, HasBuiltIn: true,
		Injector: "identity.trustDomain", Doc: "trust domain of the SPIFFE IDs"},
	{Path: "spiffe.enabled", Kind: Bool, Env: "KAGENTI_SPIFFE_ENABLED", BuiltIn: strconv.FormatBool(SpiffeEnabled), HasBuiltIn: true,
		Doc: "SPIFFE identity (spiffe-helper); the injector writes `true` when it injected spiffe-helper (label `kagenti.io/spiffe`)"},
	{Path: "spiffe.socketPath", Kind: String, Env: "KAGENTI_SPIFFE_SOCKET", Injector: "identity.socketPath", StartupOnly: true,
		Default: "`/run/spire/agent-sockets/agent.sock`", Doc: "SPIRE agent's Workload API socket, in `/run/spire/agent-sockets/` (`unix://` is stripped); written only with SPIFFE on"},
	{Path: "spiffe.outputFormat", Kind: String, Default: "`jwt`", Doc: "SVID format: `jwt` only"},
	{Path: "spiffe.audience", Kind: String, Env: "KAGENTI_JWT_AUDIENCE", Injector: "identity.jwtAudience", StartupOnly: true,
		Default: "`kagenti-agents`", Doc: "audience of the JWT SVID; written only with SPIFFE on"},
	{Path: "clientRegistration.provider", Kind: String, Env: "KAGENTI_IDP_PROVIDER", Injector: "identity.provider", Implied: "keycloak",
		Doc: "identity provider: `keycloak` (admin REST API) or `oidc` (RFC 7591)"},
	{Path: "clientRegistration.keycloak.url", Kind: String, Env: "KAGENTI_IDP_URL", BuiltIn: IdPURL, HasBuiltIn: true,
		Injector: "identity.idpURL", Doc: "Keycloak's URL; token, issuer and JWKS URLs derive from it and the realm"},
	{Path: "clientRegistration.keycloak.realm", Kind: String, Env: "KAGENTI_REALM", BuiltIn: Realm, HasBuiltIn: true,
		Injector: "identity.realm", Doc: "Keycloak realm"},
	{Path: "clientRegistration.keycloak.adminCredentialsSecret", Kind: String, CRD: Rejected, NotInFile: true,
		Doc: "rejected: the credentials are the Secret the injector mounts (`identity.idpCredentialsSecret`)"},
	{Path: "clientRegistration.oidc.issuer", Kind: String, Env: "KAGENTI_OIDC_ISSUER", Injector: "identity.oidc.issuer",
		Doc: "issuer of an `oidc` provider"},
	{Path: "clientRegistration.oidc.tokenUrl", Kind: String, Env: "KAGENTI_OIDC_TOKEN_URL", Injector: "identity.oidc.tokenURL",
		Doc: "token endpoint of an `oidc` provider"},
	{Path: "clientRegistration.oidc.jwksUrl", Kind: String, Env: "KAGENTI_OIDC_JWKS_URL", Injector: "identity.oidc.jwksURL",
		Doc: "signing keys of an `oidc` provider"},
	{Path: "clientRegistration.oidc.registrationUrl", Kind: String, Env: "KAGENTI_OIDC_REGISTRATION_URL", Injector: "identity.oidc.registrationURL",
		Doc: "RFC 7591 registration endpoint of an `oidc` provider"},
	{Path: "clientRegistration.enabled", Kind: Bool, Env: "KAGENTI_CLIENT_REGISTRATION_ENABLED", Implied: "true",
		Doc: "registration with the identity provider; `false` when client-registration is excluded"},
	{Path: "clientRegistration.clientAuthentication", Kind: String, Default: "`clientSecret`",
		Doc: "how the client authenticates: `clientSecret` (client-registration in the pod registers it and keeps the secret) or `jwtSVID` (kagenti-tokenexchange registers it with its own SVID, bound to the workload's SPIFFE ID; the JWT SVID is the client assertion; no secret exists) ([secret-free registration](#registration-without-a-client-secret))"},
	{Path: "clientRegistration.clientId", Kind: String, CRD: Absent,
		Doc: "the client kagenti-tokenexchange registered (`jwtSVID`), written by it into `config.yaml`"},
	{Path: "clientRegistration.keycloak.clientNameTemplate", Kind: String, Env: "KAGENTI_CLIENT_NAME_TEMPLATE", BuiltIn: ClientNameTemplate, HasBuiltIn: true,
		Injector: "identity.clientNameTemplate", Doc: "name of the registered client (every provider); must start with `{{.Namespace}}`"},
	{Path: "clientRegistration.keycloak.tokenExchangeEnabled", Kind: Bool, Env: "KAGENTI_TOKEN_EXCHANGE", Implied: "true",
		Injector: "identity.tokenExchange", Doc: "the token-exchange grant on the registered client; `false` with neither registration nor SPIFFE"},
	{Path: "inbound.enabled", Kind: Bool, Env: "KAGENTI_INBOUND_ENABLED", Implied: "true", StartupOnly: true,
		Doc: "inbound token validation (auth-proxy); `false` when auth-proxy is excluded"},
	{Path: "inbound.port", Kind: Port, Env: "KAGENTI_INBOUND_PORT", BuiltIn: strconv.Itoa(InboundPort), HasBuiltIn: true,
		Injector: "identity.inboundPort", StartupOnly: true, Doc: "port auth-proxy listens on"},
	{Path: "inbound.targetPort", Kind: Port, Env: "KAGENTI_TARGET_PORT", BuiltIn: strconv.Itoa(TargetPort), HasBuiltIn: true,
		Injector: "identity.targetPort", Doc: "the agent's port behind auth-proxy"},
	{Path: "inbound.excludePorts", Kind: Ports, Env: "KAGENTI_INBOUND_PORTS_EXCLUDE", Merge: Union, CRD: Absent, StartupOnly: true,
		Doc: "inbound ports not redirected (annotation `kagenti.io/inbound-ports-exclude`)"},
	{Path: "inbound.validation.enabled", Kind: Bool, Default: "`true`", Doc: "validation of incoming tokens"},
	{Path: "inbound.validation.issuer", Kind: String, Default: "the provider's issuer", Doc: "expected `iss`"},
	{Path: "inbound.validation.jwksUrl", Kind: String, Default: "the provider's JWKS URL", Doc: "signing keys of incoming tokens"},
	{Path: "inbound.validation.audience", Kind: String, Default: "the workload's SPIFFE ID", Doc: "expected `aud` (`self`: the SPIFFE ID)"},
	{Path: "inbound.validation.requiredScopes", Kind: Strings, Doc: "scopes every incoming token must carry"},
	{Path: "inbound.validation.jwksRefreshSeconds", Kind: Seconds, Env: "KAGENTI_JWKS_REFRESH_SECONDS", Implied: strconv.Itoa(JWKSRefreshSeconds),
		Injector: "identity.jwksRefreshSeconds", Doc: "how often the signing keys are fetched again (10 to 86400 s); a token naming an unknown key fetches them at once"},
	{Path: "inbound.authorization.rules", Kind: AuthzRules,
		Doc: "named CEL rules (`name`, `effect` Allow or Deny, `when`) over the verified facts of a request; deny overrides allow ([authorization](authorization.md))"},
	{Path: "inbound.authorization.default", Kind: String, Default: "`Deny` when a rule allows, else `Allow`",
		Doc: "effect when no rule matches: `Allow` or `Deny`"},
	{Path: "inbound.authorization.dryRun", Kind: Bool, Default: "`false`", Doc: "log what the policy would deny, admit the request"},
	{Path: "inbound.authorization.maxChainDepth", Kind: Count, Default: "`8`",
		Doc: "most actors (nested `act` claims) an incoming token may carry (1 to 16); a deeper chain is an invalid token"},
	{Path: "inbound.authorization.external.address", Kind: String,
		Doc: "external authorizer (Envoy's ext_authz gRPC, e.g. OPA), asked after the rules allow: `host:port`, `dns:///host:port` or `unix:///path`; plaintext only to loopback or a unix socket ([authorization](authorization.md#external-authorizer-ext_authz-opa))"},
	{Path: "inbound.authorization.external.timeout", Kind: String, Default: "`200ms`",
		Doc: "longest wait for the external authorizer's answer (10ms to 5s); no answer is no decision"},
	{Path: "inbound.authorization.external.failOpen", Kind: Bool, Default: "`false`",
		Doc: "allow the request when the external authorizer gives no decision (timeout, error); an explicit denial still denies"},
	{Path: "inbound.authorization.external.tls.caBundle", Kind: String,
		Doc: "PEM certificates the external authorizer's must chain to; setting it turns TLS on (required for a remote address)"},
	{Path: "inbound.authorization.external.tls.serverName", Kind: String, Default: "the address's host",
		Doc: "name the external authorizer's certificate must carry"},
	{Path: "outbound.enabled", Kind: Bool, Env: "KAGENTI_OUTBOUND_ENABLED", Implied: "true", StartupOnly: true,
		Doc: "outbound interception and token exchange (envoy-proxy); `false` when envoy-proxy is excluded"},
	{Path: "outbound.trafficInterception.enabled", Kind: Bool, Default: "`true`", StartupOnly: true, Doc: "redirect of outgoing traffic to the proxy"},
	{Path: "outbound.trafficInterception.proxyPort", Kind: Port, Env: "KAGENTI_OUTBOUND_PORT", BuiltIn: strconv.Itoa(OutboundPort), HasBuiltIn: true,
		Injector: "identity.outboundPort", StartupOnly: true, Doc: "port the outbound proxy listens on"},
	{Path: "outbound.trafficInterception.proxyUid", Kind: UID, Env: "KAGENTI_PROXY_UID", BuiltIn: strconv.Itoa(ProxyUID), HasBuiltIn: true,
		Injector: "identity.proxyUID", CRD: Rejected, NotInFile: true,
		Doc: "the proxies' UID, which the redirect lets through; only the injector sets it"},
	{Path: "outbound.trafficInterception.excludePorts", Kind: Ports, Env: "KAGENTI_OUTBOUND_PORTS_EXCLUDE", Merge: Union, StartupOnly: true,
		Doc: "outbound ports not intercepted (and annotation `kagenti.io/outbound-ports-exclude`)"},
	{Path: "outbound.tokenExchange.enabled", Kind: Bool, Env: "KAGENTI_TOKEN_EXCHANGE", Implied: "true",
		Injector: "identity.tokenExchange", Doc: "RFC 8693 exchange of outgoing tokens"},
	{Path: "outbound.tokenExchange.tokenUrl", Kind: String, Default: "the provider's token URL", Doc: "token endpoint of the exchange"},
	{Path: "outbound.tokenExchange.delegation", Kind: String, Default: "`immediateCaller`",
		Doc: "`chained`: the identity provider verifies an actor token and nests `act` (the outbound proxy sends its JWT SVID as `actor_token`); `immediateCaller`: no actor token, a callee knows only its immediate caller"},
	{Path: "outbound.tokenExchange.defaultTarget.audience", Kind: String, Env: "KAGENTI_DEFAULT_AUDIENCE", BuiltIn: DefaultAudience, HasBuiltIn: true,
		Injector: "identity.defaultAudience", Doc: "audience of exchanged tokens no rule chooses"},
	{Path: "outbound.tokenExchange.defaultTarget.scopes", Kind: Strings, Doc: "scopes of exchanged tokens no rule chooses"},
	{Path: "outbound.tokenExchange.defaultTarget.allowScopeEscalation", Kind: Bool, Default: "`false`",
		Doc: "let an exchange ask for scopes the caller's token lacks (else refused: scopes only narrow along a delegation chain); a rule's target inherits it"},
	{Path: "outbound.tokenExchange.destinationRules", Kind: Rules, Doc: "exchanged token per destination host; the first match wins"},
	{Path: "outbound.egress.default", Kind: String, Default: "`Allow`",
		Doc: "what a destination no egress rule allows gets: `Allow` or `Deny` (fail closed) ([egress policy](authorization.md#egress-policy))"},
	{Path: "outbound.egress.allow", Kind: EgressRules,
		Doc: "destinations the workload may call: each rule one of `host` (pattern, optional `:port`), `cidr` or `agent` (`name`, `namespace`), with optional `ports`"},
	{Path: "outbound.egress.dryRun", Kind: Bool, Default: "`false`", Doc: "log what the egress policy would deny, let the traffic through"},
	{Path: "mtls.mode", Kind: String, Default: "`off`", StartupOnly: true,
		Doc: "mutual TLS between sidecars with X.509 SVIDs: `off`, `permissive` (inbound accepts both, outbound falls back to plain HTTP) or `strict` (only mTLS); needs SPIFFE ([mTLS](#mutual-tls-between-sidecars))"},
}

// Setting is one identity setting.
type Setting struct {
	// Path is the field in a TokenExchange's spec and in config.yaml, e.g. inbound.port.
	Path string
	Kind Kind
	// Env is the variable of defaults.env carrying the injector's default; "" for none (the
	// data plane's default is fixed or derived from other settings).
	Env string
	// BuiltIn is the value the data plane takes when defaults.env has no line for Env
	// (HasBuiltIn); the injector writes no line with that value.
	BuiltIn    string
	HasBuiltIn bool
	// Implied is, for a variable without a built-in value, what the data plane resolves when it
	// is not set: a switch is on, the provider is keycloak, anything else unset ("").
	Implied string
	// Injector is the field of the injector's configuration (config.yaml of kagenti-injector) the
	// default comes from; "" when the workload decides it (its labels, annotations and
	// excluded components).
	Injector string
	Merge    Merge
	// CRD says whether the TokenExchange API has the field.
	CRD CRDField
	// NotInFile: config.yaml has no such field (only the environment sets it).
	NotInFile bool
	// StartupOnly: a changed value takes effect when the pod restarts (docs/identity.md).
	StartupOnly bool
	// Default describes the default for the docs when it is no built-in value.
	Default string
	// Doc says what the setting does, for the docs.
	Doc string
}

// Kind is the type of a setting's value, and so how its variable is read.
type Kind int

// Kinds of values.
const (
	String      Kind = iota
	Bool             // true or false
	Port             // 1-65535
	UID              // 0 to 2^31-1
	Ports            // comma-separated ports
	Strings          // a list (config.yaml only)
	Rules            // the destination rules (config.yaml only)
	Seconds          // a whole number of seconds, 1 to 86400
	AuthzRules       // the authorization rules (config.yaml only)
	Count            // a small whole number (config.yaml only)
	EgressRules      // the egress allow rules (config.yaml only)
)

func (k Kind) String() string {
	return [...]string{"string", "bool", "port", "uid", "ports", "list", "rules", "seconds", "authorization rules", "count", "egress rules"}[k]
}

// Merge is how config.yaml's value combines with the injector's default.
type Merge int

const (
	// Override: a value set in config.yaml wins (a list that is set, even empty, replaces).
	Override Merge = iota
	// Union: the sorted union of both lists (an excluded port stays excluded).
	Union
)

// CRDField says how the TokenExchange API holds a setting.
type CRDField int

const (
	// Settable: a field of TokenExchangeSpec.
	Settable CRDField = iota
	// Rejected: a field of TokenExchangeSpec that admission refuses, so that a manifest setting
	// it is told why rather than pruned.
	Rejected
	// Absent: not in the API (the injector, or kagenti-tokenexchange from what it learnt, sets it).
	Absent
)

// Lookup returns the row of path.
func Lookup(path string) (Setting, bool) {
	for _, s := range Settings {
		if s.Path == path {
			return s, true
		}
	}
	return Setting{}, false
}

// NeedsLine reports whether the injector must write value for s into defaults.env: whether the
// data plane would resolve something else without the line. An empty value of a variable with a
// built-in value is written ("NAME=" unsets it).
func (s Setting) NeedsLine(value string) bool {
	if s.HasBuiltIn {
		return value != s.BuiltIn
	}
	return value != s.Implied
}

// Parse reads value as s's variable carries it: strings as is, the rest per Kind. The error
// says why, for a message naming the variable.
func (s Setting) Parse(value string) (any, error) {
	switch s.Kind {
	case String:
		return value, nil
	case Bool:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", value)
		}
		return b, nil
	case Port:
		return parsePort(value)
	case Seconds:
		n, err := strconv.ParseInt(value, 10, 32)
		if err != nil || n < 1 || n > 86400 {
			return nil, fmt.Errorf("%q is not a number of seconds (1-86400)", value)
		}
		return int32(n), nil
	case UID:
		u, err := strconv.ParseInt(value, 10, 64)
		if err != nil || u < 0 || u > 1<<31-1 {
			return nil, fmt.Errorf("%q is not a UID", value)
		}
		return u, nil
	case Ports:
		// The format of the kagenti.io/*-ports-exclude annotations.
		var out []int32
		for f := range strings.SplitSeq(value, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			p, err := parsePort(f)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s has no variable", s.Path)
}

func parsePort(v string) (int32, error) {
	p, err := strconv.ParseInt(v, 10, 32)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", v)
	}
	return int32(p), nil
}

// Variables returns the distinct variables of Settings, in table order.
func Variables() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range Settings {
		if s.Env != "" && !seen[s.Env] {
			seen[s.Env] = true
			out = append(out, s.Env)
		}
	}
	return out
}
