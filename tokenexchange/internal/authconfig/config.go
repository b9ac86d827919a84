package authconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/kagenti/platform/pkg/configmap/authz"
)

// Identity providers.
const (
	// ProviderKeycloak registers through Keycloak's admin REST API and derives the endpoints from
	// the Keycloak URL and realm.
	ProviderKeycloak = "keycloak"
	// ProviderOIDC registers through RFC 7591 dynamic client registration with any provider
	// whose endpoints are given explicitly.
	ProviderOIDC = "oidc"
)

// OutputJWT is the one SVID output format: spiffe-helper writes the JWT SVID that the outbound
// proxy authenticates with. (X.509 SVID files would have no reader in the pod.)
const OutputJWT = "jwt"

// Config is the resolved configuration a data-plane role runs: every field set, every value
// checked. Build it with Resolve.
type Config struct {
	Workload Workload `json:"workload"`
	// SpiffeID is the workload's SPIFFE ID under the SPIRE Kubernetes registrar's convention.
	SpiffeID           string             `json:"spiffeId"`
	Spiffe             Spiffe             `json:"spiffe"`
	IdP                IdP                `json:"idp"`
	ClientRegistration ClientRegistration `json:"clientRegistration"`
	Inbound            Inbound            `json:"inbound"`
	Outbound           Outbound           `json:"outbound"`
	MTLS               MTLS               `json:"mtls"`
}

// mTLS modes (mtls.mode).
const (
	MTLSOff        = "off"
	MTLSPermissive = "permissive"
	MTLSStrict     = "strict"
)

// MTLS is the resolved mtls section: Mode is always off, permissive or strict.
type MTLS struct {
	Mode string `json:"mode"`
}

// On reports whether the sidecars speak mTLS at all (permissive or strict).
func (m MTLS) On() bool { return m.Mode == MTLSPermissive || m.Mode == MTLSStrict }

// Workload is who the sidecars work for, from the downward API and the injector.
type Workload struct {
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	PodName        string `json:"podName"`
	ServiceAccount string `json:"serviceAccount"`
}

// SpiffeID returns spiffe://{trustDomain}/ns/{namespace}/sa/{serviceAccount}.
func (w Workload) SpiffeID(trustDomain string) string {
	sa := w.ServiceAccount
	if sa == "" {
		sa = "default"
	}
	return fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", trustDomain, w.Namespace, sa)
}

// Spiffe is the resolved SPIFFE section; SocketPath never carries a scheme.
type Spiffe struct {
	Enabled      bool   `json:"enabled"`
	TrustDomain  string `json:"trustDomain"`
	SocketPath   string `json:"socketPath"`
	OutputFormat string `json:"outputFormat"`
	Audience     string `json:"audience"`
}

// IdP locates the identity provider.
type IdP struct {
	Provider string `json:"provider"`
	// KeycloakURL and Realm are set for ProviderKeycloak.
	KeycloakURL string `json:"keycloakUrl,omitempty"`
	Realm       string `json:"realm,omitempty"`
	Issuer      string `json:"issuer"`
	TokenURL    string `json:"tokenUrl"`
	JWKSURL     string `json:"jwksUrl"`
	// RegistrationURL is the RFC 7591 endpoint, for ProviderOIDC.
	RegistrationURL string `json:"registrationUrl,omitempty"`
}

// Client authentication methods (clientRegistration.clientAuthentication).
const (
	// ClientAuthClientSecret: client-registration registers the client and writes its secret.
	ClientAuthClientSecret = "clientSecret"
	// ClientAuthJWTSVID: kagenti-tokenexchange registers the client (ClientID); the outbound proxy
	// authenticates with the JWT SVID as client assertion.
	ClientAuthJWTSVID = "jwtSVID"
)

// ClientRegistration is the resolved registration section.
type ClientRegistration struct {
	Enabled bool `json:"enabled"`
	// ClientAuthentication is ClientAuthClientSecret or ClientAuthJWTSVID.
	ClientAuthentication string `json:"clientAuthentication"`
	// ClientID is, for ClientAuthJWTSVID, the client the controller registered ("" until it has).
	ClientID           string `json:"clientId,omitempty"`
	ClientNameTemplate string `json:"clientNameTemplate"`
	// ClientName is ClientNameTemplate rendered for this pod.
	ClientName           string `json:"clientName"`
	TokenExchangeEnabled bool   `json:"tokenExchangeEnabled"`
}

// Inbound is the resolved inbound section.
type Inbound struct {
	Enabled       bool          `json:"enabled"`
	Port          int32         `json:"port"`
	TargetPort    int32         `json:"targetPort"`
	ExcludePorts  []int32       `json:"excludePorts"`
	Validation    Validation    `json:"validation"`
	Authorization Authorization `json:"authorization"`
}

// Authorization is the resolved inbound authorization policy (authz.Config: the shared module
// holds its config.yaml shape, which agentcard's discovery API reads too).
type Authorization = authz.Config

// External is the resolved external authorizer.
type External = authz.ExternalConfig

// ExternalTLS is the TLS of the connection to the external authorizer.
type ExternalTLS = authz.ExternalTLS

// Validation is the resolved inbound token validation; Audience is never "self".
type Validation struct {
	Enabled        bool     `json:"enabled"`
	Issuer         string   `json:"issuer"`
	JWKSURL        string   `json:"jwksUrl"`
	Audience       string   `json:"audience"`
	RequiredScopes []string `json:"requiredScopes"`
	// JWKSRefreshSeconds is how often the inbound proxy fetches the signing keys again.
	JWKSRefreshSeconds int32 `json:"jwksRefreshSeconds"`
}

// Outbound is the resolved outbound section.
type Outbound struct {
	Enabled       bool          `json:"enabled"`
	Interception  Interception  `json:"trafficInterception"`
	TokenExchange TokenExchange `json:"tokenExchange"`
	Egress        Egress        `json:"egress"`
}

// Egress is the resolved egress policy: Default is always Allow or Deny, an agent rule is its
// Service's names.
type Egress struct {
	Default string        `json:"default"`
	Allow   []EgressAllow `json:"allow"`
	DryRun  bool          `json:"dryRun"`
}

// EgressAllow is one allow rule: host patterns (one for a host rule, the four Service names of an
// agent rule) or a CIDR, on Ports (all when empty).
type EgressAllow struct {
	Hosts []string `json:"hosts"`
	CIDR  string   `json:"cidr"`
	Ports []int32  `json:"ports"`
}

// Egress defaults.
const (
	EgressAllowAll = "Allow"
	EgressDeny     = "Deny"
)

// Interception is the resolved traffic interception.
type Interception struct {
	Enabled      bool    `json:"enabled"`
	ProxyPort    int32   `json:"proxyPort"`
	ProxyUID     int64   `json:"proxyUid"`
	ExcludePorts []int32 `json:"excludePorts"`
}

// TokenExchange is the resolved outbound token exchange.
type TokenExchange struct {
	Enabled  bool   `json:"enabled"`
	TokenURL string `json:"tokenUrl"`
	// Delegation is DelegationChained or DelegationImmediateCaller.
	Delegation    string  `json:"delegation"`
	DefaultTarget Target  `json:"defaultTarget"`
	Routes        []Route `json:"routes"`
}

// Delegation modes: whether the identity provider verifies an actor token and nests act claims.
const (
	DelegationChained         = "chained"
	DelegationImmediateCaller = "immediateCaller"
)

// Target is the audience and scopes a token is exchanged for.
type Target struct {
	Audience string   `json:"audience"`
	Scopes   []string `json:"scopes"`
	// AllowScopeEscalation lets the exchange ask for scopes the subject token does not carry;
	// without it the outbound proxy refuses (scopes only narrow along a delegation chain).
	AllowScopeEscalation bool `json:"allowScopeEscalation"`
}

// Route is a destination rule with the default target filled in: the first route whose Host
// matches a request decides; Passthrough forwards the request's token unchanged.
type Route struct {
	Host        string `json:"host"`
	Passthrough bool   `json:"passthrough"`
	Target      Target `json:"target"`
}

// Hash identifies the resolved configuration's content.
func (c Config) Hash() string {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("marshalling Config: %v", err)) // plain structs: cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// Exchanges reports whether outgoing requests get exchanged tokens at all.
func (c Config) Exchanges() bool {
	return c.Outbound.Enabled && c.Outbound.TokenExchange.Enabled
}

// StartupSetting is a setting read only when the pod starts: the traffic rules proxy-init
// installs, the ports the proxies listen on and the spiffe-helper configuration. A changed value
// takes effect when the pod is recreated; the roles report it until then. inbound.enabled and
// outbound.enabled are both: they decide at pod start whether traffic is redirected, and at run
// time whether the proxy validates or exchanges.
type StartupSetting struct {
	Path  string
	value func(Config) any
}

// StartupSettings lists every setting that takes effect only at pod start.
var StartupSettings = []StartupSetting{
	{"spiffe.socketPath", func(c Config) any { return c.Spiffe.SocketPath }},
	{"spiffe.audience", func(c Config) any { return c.Spiffe.Audience }},
	{"inbound.enabled", func(c Config) any { return c.Inbound.Enabled }},
	{"inbound.port", func(c Config) any { return c.Inbound.Port }},
	{"inbound.excludePorts", func(c Config) any { return c.Inbound.ExcludePorts }},
	{"outbound.enabled", func(c Config) any { return c.Outbound.Enabled }},
	{"outbound.trafficInterception.enabled", func(c Config) any { return c.Outbound.Interception.Enabled }},
	{"outbound.trafficInterception.proxyPort", func(c Config) any { return c.Outbound.Interception.ProxyPort }},
	{"outbound.trafficInterception.excludePorts", func(c Config) any { return c.Outbound.Interception.ExcludePorts }},
	{"mtls.mode", func(c Config) any { return c.MTLS.Mode }},
}

// PendingRestart returns the paths of the startup settings whose value in next differs from the
// one the pod started with.
func PendingRestart(started, next Config) []string {
	var out []string
	for _, s := range StartupSettings {
		a, b := s.value(started), s.value(next)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			out = append(out, s.Path)
		}
	}
	return out
}

// WithStartupSettingsOf returns c with the startup-only parts taken from started (the enabled
// switches stay c's: their run-time half applies at once), which is what a running pod does.
func (c Config) WithStartupSettingsOf(started Config) Config {
	c.Spiffe.SocketPath = started.Spiffe.SocketPath
	c.Spiffe.Audience = started.Spiffe.Audience
	c.Inbound.Port = started.Inbound.Port
	c.Inbound.ExcludePorts = slices.Clone(started.Inbound.ExcludePorts)
	c.Outbound.Interception = started.Outbound.Interception
	c.Outbound.Interception.ExcludePorts = slices.Clone(started.Outbound.Interception.ExcludePorts)
	c.MTLS = started.MTLS // the listeners and the SVID source are built at start
	return c
}
