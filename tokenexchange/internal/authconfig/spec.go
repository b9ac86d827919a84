// Package authconfig is the configuration schema of the tokenexchange data plane
// (kagenti-authbridge): the one Go package that the tokenexchange controller renders into the
// ConfigMap {workload}-token-exchange and that every data-plane role loads from it, so the two
// cannot drift.
//
// Three inputs make one configuration:
//
//   - the defaults the injector passes to every identity sidecar as environment variables
//     (DefaultsFromEnv; the injector's configuration is their only source),
//   - config.yaml of the ConfigMap, a Spec holding only what a TokenExchange sets (Parse),
//   - the workload's identity from the downward API (WorkloadFromEnv).
//
// Resolve merges the Spec over the defaults for the workload into a Config in which every field
// is set and checked. The package is pure and small on purpose: no Kubernetes client, no I/O
// besides what callers hand it, so the sidecars stay small.
package authconfig

import "github.com/kagenti/platform/pkg/configmap/authz"

// Spec is config.yaml: identity settings of one workload, every field optional. A field left
// out keeps its default. Its JSON shape is TokenExchangeSpec's (without targetRef), so the
// controller renders a TokenExchange's spec as is; a few fields exist only here (marked below):
// the injector sets them through the environment, and a later API version may expose them.
type Spec struct {
	Spiffe             *SpiffeSpec             `json:"spiffe,omitempty"`
	ClientRegistration *ClientRegistrationSpec `json:"clientRegistration,omitempty"`
	Inbound            *InboundSpec            `json:"inbound,omitempty"`
	Outbound           *OutboundSpec           `json:"outbound,omitempty"`
	MTLS               *MTLSSpec               `json:"mtls,omitempty"`
}

// MTLSSpec configures mutual TLS between sidecars: Mode is off, permissive or strict.
type MTLSSpec struct {
	Mode string `json:"mode,omitempty"`
}

// SpiffeSpec configures the workload's SPIFFE identity (spiffe-helper).
type SpiffeSpec struct {
	Enabled     *bool  `json:"enabled,omitempty"`
	TrustDomain string `json:"trustDomain,omitempty"`
	// SocketPath names the SPIRE agent's socket; in a pod it is in SpireSocketDir, the only
	// directory mounted into spiffe-helper.
	SocketPath string `json:"socketPath,omitempty"`
	// OutputFormat can only be jwt: the sidecars read the JWT SVID and nothing reads X.509 SVID
	// files, so x509 is an error rather than files nobody uses.
	OutputFormat string `json:"outputFormat,omitempty"`
	Audience     string `json:"audience,omitempty"`
}

// ClientRegistrationSpec configures the registration with the identity provider.
type ClientRegistrationSpec struct {
	Enabled  *bool         `json:"enabled,omitempty"`
	Provider string        `json:"provider,omitempty"`
	Keycloak *KeycloakSpec `json:"keycloak,omitempty"`
	// OIDC configures a provider other than Keycloak, registered with through RFC 7591
	// dynamic client registration.
	OIDC                 *OIDCSpec `json:"oidc,omitempty"`
	ClientAuthentication string    `json:"clientAuthentication,omitempty"`
	// ClientID is the client kagenti-tokenexchange registered (ClientAuthentication jwtSVID): not
	// in the API, written by the controller into config.yaml.
	ClientID string `json:"clientId,omitempty"`
}

// KeycloakSpec configures Keycloak, registered with through its admin REST API.
type KeycloakSpec struct {
	URL   string `json:"url,omitempty"`
	Realm string `json:"realm,omitempty"`
	// ClientNameTemplate names the registered client, for every provider.
	ClientNameTemplate   string `json:"clientNameTemplate,omitempty"`
	TokenExchangeEnabled *bool  `json:"tokenExchangeEnabled,omitempty"`
}

// OIDCSpec locates a standards-compliant OpenID provider.
type OIDCSpec struct {
	Issuer          string `json:"issuer,omitempty"`
	TokenURL        string `json:"tokenUrl,omitempty"`
	JWKSURL         string `json:"jwksUrl,omitempty"`
	RegistrationURL string `json:"registrationUrl,omitempty"`
}

// InboundSpec configures the inbound proxy (auth-proxy).
type InboundSpec struct {
	Enabled    *bool           `json:"enabled,omitempty"`
	Port       *int32          `json:"port,omitempty"`
	TargetPort *int32          `json:"targetPort,omitempty"`
	Validation *ValidationSpec `json:"validation,omitempty"`
	// Authorization is the policy applied to requests with a valid token.
	Authorization *AuthorizationSpec `json:"authorization,omitempty"`
	// ExcludePorts are inbound destination ports that are not redirected to the proxy (the
	// workload annotation kagenti.io/inbound-ports-exclude). Only here.
	ExcludePorts []int32 `json:"excludePorts,omitempty"`
}

// ValidationSpec configures inbound token validation.
type ValidationSpec struct {
	Enabled        *bool    `json:"enabled,omitempty"`
	Issuer         string   `json:"issuer,omitempty"`
	JWKSURL        string   `json:"jwksUrl,omitempty"`
	Audience       string   `json:"audience,omitempty"`
	RequiredScopes []string `json:"requiredScopes,omitempty"`
	// JWKSRefreshSeconds is how often the signing keys are fetched again.
	JWKSRefreshSeconds *int32 `json:"jwksRefreshSeconds,omitempty"`
}

// AuthorizationSpec is the inbound authorization policy (docs/authorization.md), as config.yaml
// spells it: authz.Spec, shared with agentcard's discovery API, which reads the same bytes.
type AuthorizationSpec = authz.Spec

// ExternalAuthorizerSpec is an external authorizer (Envoy's ext_authz gRPC API).
type ExternalAuthorizerSpec = authz.ExternalSpec

// ExternalTLSSpec is the TLS of the connection to the external authorizer.
type ExternalTLSSpec = authz.ExternalTLSSpec

// AuthorizationRule is a named CEL rule with its effect, Allow or Deny.
type AuthorizationRule = authz.RuleConfig

// OutboundSpec configures outbound traffic (the outbound proxy, seed name envoy-proxy).
type OutboundSpec struct {
	Enabled             *bool                    `json:"enabled,omitempty"`
	TrafficInterception *TrafficInterceptionSpec `json:"trafficInterception,omitempty"`
	TokenExchange       *TokenExchangeSpec       `json:"tokenExchange,omitempty"`
	Egress              *EgressSpec              `json:"egress,omitempty"`
}

// EgressSpec is the workload's egress policy (docs/authorization.md, "Egress policy").
type EgressSpec struct {
	// Default is Allow or Deny; Allow when empty.
	Default string       `json:"default,omitempty"`
	Allow   []EgressRule `json:"allow,omitempty"`
	DryRun  *bool        `json:"dryRun,omitempty"`
}

// EgressRule allows destinations: exactly one of Host (a pattern as DestinationMatch's), CIDR and
// Agent, on Ports (all when empty).
type EgressRule struct {
	Host  string       `json:"host,omitempty"`
	CIDR  string       `json:"cidr,omitempty"`
	Agent *EgressAgent `json:"agent,omitempty"`
	Ports []int32      `json:"ports,omitempty"`
}

// EgressAgent is an agent's Service; Namespace defaults to the workload's.
type EgressAgent struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// TrafficInterceptionSpec configures the redirect of outgoing traffic to the proxy.
type TrafficInterceptionSpec struct {
	Enabled   *bool  `json:"enabled,omitempty"`
	ProxyPort *int32 `json:"proxyPort,omitempty"`
	// ProxyUID comes only from the environment (KAGENTI_PROXY_UID): it is the runAsUser the
	// injector gives the proxies, which the interception rules let through, so config.yaml cannot
	// set it (not part of its schema; the TokenExchange CRD rejects the field).
	ProxyUID     *int64  `json:"-" path:"proxyUid"`
	ExcludePorts []int32 `json:"excludePorts,omitempty"`
}

// TokenExchangeSpec configures RFC 8693 token exchange for outgoing requests.
type TokenExchangeSpec struct {
	Enabled          *bool             `json:"enabled,omitempty"`
	TokenURL         string            `json:"tokenUrl,omitempty"`
	Delegation       string            `json:"delegation,omitempty"`
	DefaultTarget    *ExchangeTarget   `json:"defaultTarget,omitempty"`
	DestinationRules []DestinationRule `json:"destinationRules,omitempty"`
}

// ExchangeTarget is what a token is exchanged for.
type ExchangeTarget struct {
	Audience string   `json:"audience,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`
	// AllowScopeEscalation lets the outbound proxy ask for scopes the caller's token lacks.
	AllowScopeEscalation *bool `json:"allowScopeEscalation,omitempty"`
}

// DestinationRule selects the token for requests to one host; without a target, matching
// requests pass through with their original token.
type DestinationRule struct {
	Match  DestinationMatch `json:"match"`
	Target *ExchangeTarget  `json:"target,omitempty"`
}

// DestinationMatch selects destinations: a host, * matching any run of characters, with an
// optional :port that must match too.
type DestinationMatch struct {
	Host string `json:"host"`
}
