package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/pkg/duck"
)

// TokenExchange customises the identity sidecars the injector put into one workload: SPIFFE, the
// identity-provider registration, inbound token validation and outbound RFC 8693 token exchange.
// The controller renders it, merged over the injector's defaults, into the ConfigMap
// {workload}-token-exchange that the sidecars read from /etc/kagenti/identity/.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tx,categories=kagenti
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.targetRef.kind`,priority=1
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.configuredPods`
// +kubebuilder:printcolumn:name="Propagated",type=string,JSONPath=`.status.conditions[?(@.type=="ConfigPropagated")].status`,priority=1
// +kubebuilder:printcolumn:name="ConfigMap",type=string,JSONPath=`.status.configMapName`,priority=1
// +kubebuilder:printcolumn:name="Delegation",type=string,JSONPath=`.status.delegation`,priority=1
// +kubebuilder:printcolumn:name="mTLS",type=string,JSONPath=`.status.mtls`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TokenExchange struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TokenExchangeSpec `json:"spec"`
	// Status defaults to observedGeneration 0, so that tools read a TokenExchange the controller
	// has not seen yet as in progress.
	// +kubebuilder:default={observedGeneration:0}
	Status TokenExchangeStatus `json:"status,omitempty"`
}

// TokenExchangeSpec is the identity configuration of one workload. Every section and field is
// optional: what is left out keeps the injector's default (docs/tokenexchange.md lists them).
//
// +kubebuilder:validation:XValidation:rule="!has(self.mtls) || !has(self.mtls.mode) || self.mtls.mode == 'off' || !has(self.spiffe) || !has(self.spiffe.enabled) || self.spiffe.enabled",message="mtls.mode permissive or strict needs SPIFFE: the sidecars present the workload's X.509 SVID; remove spiffe.enabled: false or set mtls.mode: off",fieldPath=".mtls.mode",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.clientRegistration) || !has(self.clientRegistration.clientAuthentication) || self.clientRegistration.clientAuthentication != 'jwtSVID' || !has(self.spiffe) || !has(self.spiffe.enabled) || self.spiffe.enabled",message="clientRegistration.clientAuthentication jwtSVID needs SPIFFE: the workload authenticates with its JWT SVID; remove spiffe.enabled: false or use clientSecret",fieldPath=".clientRegistration.clientAuthentication",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.inbound) || !has(self.outbound) || !has(self.outbound.trafficInterception) || (has(self.inbound.port) ? self.inbound.port : 8080) != (has(self.outbound.trafficInterception.proxyPort) ? self.outbound.trafficInterception.proxyPort : 15123)",message="outbound.trafficInterception.proxyPort must differ from inbound.port",fieldPath=".outbound.trafficInterception.proxyPort",reason="FieldValueInvalid"
type TokenExchangeSpec struct {
	// TargetRef names the workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob or
	// any kind with a pod template) in this namespace whose identity sidecars are configured.
	TargetRef duck.TargetRef `json:"targetRef"`

	// Spiffe configures how the workload obtains its SPIFFE identity (spiffe-helper).
	// +optional
	Spiffe *SpiffeSpec `json:"spiffe,omitempty"`

	// ClientRegistration configures the registration of the workload as an OAuth client with the
	// identity provider (client-registration).
	// +optional
	ClientRegistration *ClientRegistrationSpec `json:"clientRegistration,omitempty"`

	// Inbound configures the proxy in front of the agent that validates incoming tokens (auth-proxy).
	// +optional
	Inbound *InboundSpec `json:"inbound,omitempty"`

	// Outbound configures interception of outgoing traffic and token exchange (envoy-proxy).
	// +optional
	Outbound *OutboundSpec `json:"outbound,omitempty"`

	// MTLS configures mutual TLS between the workload's sidecars and other kagenti sidecars, both
	// presenting X.509 SVIDs from the SPIRE agent (docs/identity.md, "Mutual TLS").
	// +optional
	MTLS *MTLSSpec `json:"mtls,omitempty"`
}

// mTLS modes.
const (
	// MTLSOff serves and sends plain HTTP between sidecars (the default).
	MTLSOff = "off"
	// MTLSPermissive accepts both mTLS and plain HTTP inbound, and originates mTLS outbound to
	// sidecars that accept it, plain HTTP to the others.
	MTLSPermissive = "permissive"
	// MTLSStrict accepts only mTLS inbound and sends only mTLS to other sidecars.
	MTLSStrict = "strict"
)

// MTLSSpec configures mutual TLS between sidecars.
type MTLSSpec struct {
	// Mode is off, permissive (accept both while a namespace migrates) or strict (only mTLS, a
	// peer with an SVID of the trust domain). Default off. Needs SPIFFE (spiffe.enabled).
	// +optional
	// +kubebuilder:validation:Enum=off;permissive;strict
	Mode string `json:"mode,omitempty"`
}

// SpiffeSpec configures the SPIFFE identity.
type SpiffeSpec struct {
	// Enabled turns SPIFFE on or off for this workload. Default true.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// TrustDomain of the SPIFFE IDs, e.g. prod.cluster.local. Default cluster.local.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$`
	TrustDomain string `json:"trustDomain,omitempty"`

	// SocketPath of the SPIRE agent's Workload API, with or without the unix:// scheme: a socket in
	// /run/spire/agent-sockets/, the directory where the injector mounts the SPIRE agent's socket
	// volume into spiffe-helper (the injector's spireSocket setting chooses what is mounted there).
	// Default /run/spire/agent-sockets/agent.sock.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^(unix://)?/[^\s]*$`
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(unix://)?/run/spire/agent-sockets/[^\\s]+$') && !self.matches('/[.][.]?(/|$)')`,message="must be a socket in /run/spire/agent-sockets/, the only directory mounted into spiffe-helper (the injector mounts the SPIRE agent's socket volume there; its spireSocket setting chooses the node's directory or CSI driver)"
	SocketPath string `json:"socketPath,omitempty"`

	// OutputFormat of the SVID written to /shared: jwt, the JWT SVID the outbound proxy
	// authenticates with. Default jwt. x509 is rejected: no container reads X.509 SVID files.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self == 'jwt'",message="must be jwt: x509 is not supported, no injected container reads X.509 SVID files (the outbound proxy authenticates with the JWT SVID or the registered client's secret); set jwt or leave the field out"
	OutputFormat string `json:"outputFormat,omitempty"`

	// Audience of the JWT SVID. Default kagenti-agents.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Audience string `json:"audience,omitempty"`
}

// Identity providers the client registration supports.
const (
	// ProviderKeycloak registers through Keycloak's admin REST API.
	ProviderKeycloak = "keycloak"
	// ProviderOIDC registers through RFC 7591 dynamic client registration with any OpenID provider.
	ProviderOIDC = "oidc"
)

// How a registered client authenticates to the identity provider (clientAuthentication).
const (
	// ClientAuthClientSecret: the provider issues a client secret, which client-registration in the
	// pod obtains with the credentials of the Secret the injector mounts.
	ClientAuthClientSecret = "clientSecret"
	// ClientAuthJWTSVID: no secret exists. kagenti-tokenexchange registers the client,
	// authenticating with its own JWT SVID, bound to the workload's SPIFFE ID; the workload
	// authenticates with its JWT SVID as the client assertion (RFC 7523).
	ClientAuthJWTSVID = "jwtSVID"
)

// ClientRegistrationSpec configures the registration with the identity provider.
//
// +kubebuilder:validation:XValidation:rule="!has(self.clientAuthentication) || self.clientAuthentication != 'jwtSVID' || (has(self.provider) && self.provider == 'oidc' && has(self.oidc) && has(self.oidc.issuer) && has(self.oidc.registrationUrl))",message="clientAuthentication jwtSVID needs provider oidc with oidc.issuer and oidc.registrationUrl set in this TokenExchange: kagenti-tokenexchange registers the client there with RFC 7591, authenticated by its own JWT SVID (Keycloak's admin API needs admin credentials, which this mode does away with)",fieldPath=".clientAuthentication",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.clientAuthentication) || self.clientAuthentication != 'jwtSVID' || !has(self.enabled) || self.enabled",message="clientAuthentication jwtSVID registers the client: it needs enabled (or leave enabled out)",fieldPath=".clientAuthentication",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.provider) || self.provider != 'keycloak' || (has(self.keycloak) && has(self.keycloak.url) && has(self.keycloak.realm))",message="provider keycloak requires keycloak.url and keycloak.realm",fieldPath=".keycloak",reason="FieldValueRequired"
// +kubebuilder:validation:XValidation:rule="!has(self.keycloak) || !has(self.provider) || self.provider == 'keycloak'",message="keycloak is only valid with provider keycloak (or provider omitted)",fieldPath=".keycloak",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.oidc) || (has(self.provider) && self.provider == 'oidc')",message="oidc is only valid with provider oidc",fieldPath=".oidc",reason="FieldValueForbidden"
type ClientRegistrationSpec struct {
	// Enabled turns client registration on or off. Default true.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Provider is the identity provider: keycloak (its admin REST API) or oidc (any OpenID provider
	// with RFC 7591 dynamic client registration). When omitted, the injector's default
	// (identity.provider, keycloak unless the cluster sets another) is used.
	// +optional
	// +kubebuilder:validation:Enum=keycloak;oidc
	Provider string `json:"provider,omitempty"`

	// Keycloak configures the Keycloak provider. Fields left out keep the cluster defaults.
	// +optional
	Keycloak *KeycloakSpec `json:"keycloak,omitempty"`

	// OIDC configures the oidc provider. Fields left out keep the cluster defaults
	// (identity.oidc of the injector configuration).
	// +optional
	OIDC *OIDCSpec `json:"oidc,omitempty"`

	// ClientAuthentication is how the workload's client authenticates to the identity provider:
	// clientSecret (client-registration in the pod registers it with the credentials of the
	// Secret the injector mounts and keeps the issued secret on the pod's shared volume) or
	// jwtSVID (no client secret exists anywhere: kagenti-tokenexchange registers the client with
	// RFC 7591, authenticated by its own JWT SVID, for private_key_jwt authentication bound to the
	// workload's SPIFFE ID, and the outbound proxy presents the workload's JWT SVID as its client
	// assertion). jwtSVID needs provider oidc with oidc.issuer and oidc.registrationUrl set here,
	// SPIFFE, and kagenti-tokenexchange run with --registrar-spiffe-socket. Default clientSecret.
	// +optional
	// +kubebuilder:validation:Enum=clientSecret;jwtSVID
	ClientAuthentication string `json:"clientAuthentication,omitempty"`
}

// OIDCSpec locates an OpenID provider registered with through RFC 7591.
type OIDCSpec struct {
	// Issuer expected in the iss claim of the provider's tokens, e.g. https://idp.example.com.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="must be an http or https URL with a host"
	Issuer string `json:"issuer,omitempty"`

	// TokenURL is the token endpoint (RFC 8693 exchange, client credentials).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="must be an http or https URL with a host"
	TokenURL string `json:"tokenUrl,omitempty"`

	// JWKSURL the provider's signing keys are fetched from.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="must be an http or https URL with a host"
	JWKSURL string `json:"jwksUrl,omitempty"`

	// RegistrationURL is the RFC 7591 client registration endpoint.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="must be an http or https URL with a host"
	RegistrationURL string `json:"registrationUrl,omitempty"`
}

// KeycloakSpec configures registration with Keycloak.
//
// +kubebuilder:validation:XValidation:rule="!has(self.adminCredentialsSecret)",message="adminCredentialsSecret is not supported: client-registration reads the identity provider's credentials from the Secret the injector mounts, kagenti-idp-credentials in the workload's namespace (the injector's identity.idpCredentialsSecret); put the credentials there and remove this field",fieldPath=".adminCredentialsSecret",reason="FieldValueForbidden"
type KeycloakSpec struct {
	// URL of the Keycloak server, e.g. http://keycloak.auth.svc:8080.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="must be an http or https URL with a host"
	URL string `json:"url,omitempty"`

	// Realm the workload is registered in.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[^\s/]+$`
	Realm string `json:"realm,omitempty"`

	// AdminCredentialsSecret is rejected: the credentials client-registration uses come from the
	// Secret the injector mounts (kagenti-idp-credentials by default, in the workload's namespace),
	// because the injector cannot read TokenExchanges at admission. The field stays in the schema
	// only so that a manifest setting it is refused with that explanation rather than pruned.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	AdminCredentialsSecret string `json:"adminCredentialsSecret,omitempty"`

	// ClientNameTemplate names the registered client: {{.Namespace}} first, then '/' (or another
	// character no namespace name has), so no two namespaces name the same client; then literal
	// text (no whitespace, control characters, '{' or '}') and the placeholders {{.PodName}},
	// {{.Namespace}}, {{.WorkloadName}}, {{.ServiceAccount}}. Not a Go template.
	// Default {{.Namespace}}/{{.WorkloadName}}.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([^{}[:space:][:cntrl:]]|[{][{] *[.](PodName|Namespace|WorkloadName|ServiceAccount) *[}][}])+$')`,message="must be literal text (no whitespace, control characters, '{' or '}') and the placeholders {{.PodName}}, {{.Namespace}}, {{.WorkloadName}}, {{.ServiceAccount}}; functions, pipelines and variables are not supported"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[{][{] *[.]Namespace *[}][}]([^-a-z0-9{]|$)')`,message="must start with {{.Namespace}} followed by '/' (or the end, or another character that cannot occur in a namespace name), so that no two namespaces can register clients of the same name"
	ClientNameTemplate string `json:"clientNameTemplate,omitempty"`

	// TokenExchangeEnabled enables the RFC 8693 token-exchange grant on the registered client.
	// Default true.
	// +optional
	TokenExchangeEnabled *bool `json:"tokenExchangeEnabled,omitempty"`
}

// InboundSpec configures the inbound proxy.
//
// +kubebuilder:validation:XValidation:rule="(has(self.port) ? self.port : 8080) != (has(self.targetPort) ? self.targetPort : 8081)",message="targetPort must differ from port",fieldPath=".targetPort",reason="FieldValueInvalid"
type InboundSpec struct {
	// Enabled turns the inbound proxy on or off. Default true.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Port the proxy listens on. Default 8080.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port *int32 `json:"port,omitempty"`

	// TargetPort of the agent the proxy forwards to. Default 8081.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	TargetPort *int32 `json:"targetPort,omitempty"`

	// Validation configures the validation of incoming tokens.
	// +optional
	Validation *ValidationSpec `json:"validation,omitempty"`

	// Authorization decides, after a token is validated, who may call this agent, on whose behalf
	// and how (docs/authorization.md). Without it every valid token is admitted.
	// +optional
	Authorization *AuthorizationSpec `json:"authorization,omitempty"`
}

// Effects of an authorization rule and of the default.
const (
	EffectAllow = "Allow"
	EffectDeny  = "Deny"
)

// AuthorizationSpec is the inbound authorization policy: named CEL rules over the verified facts
// of a request. Deny overrides allow: the request is denied when a deny rule matches, else allowed
// when an allow rule matches, else the default applies. A rule whose evaluation fails denies.
type AuthorizationSpec struct {
	// Rules are evaluated deny rules first, then allow rules, each kind in order; a rule's name
	// is what a denial, the audit log and the metrics report.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Rules []AuthorizationRule `json:"rules,omitempty"`

	// Default is the effect when no rule matches: Allow or Deny. When omitted: Deny if a rule
	// allows (the rules are an allow-list), else Allow (no rules, or deny rules only, keep every
	// other valid token admitted).
	// +optional
	// +kubebuilder:validation:Enum=Allow;Deny
	Default string `json:"default,omitempty"`

	// DryRun logs what the policy would deny and admits the request. Default false.
	// +optional
	DryRun *bool `json:"dryRun,omitempty"`

	// MaxChainDepth bounds the delegation chain (nested act claims, RFC 8693 §4.1) of an incoming
	// token; a deeper chain is refused as an invalid token. Default 8.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	MaxChainDepth *int32 `json:"maxChainDepth,omitempty"`

	// External is an external authorizer (Envoy's ext_authz gRPC API: OPA with its envoy plugin,
	// kagenti-opa-extauthz…) asked after the rules allow: both must allow. DryRun applies to it.
	// +optional
	External *ExternalAuthorizerSpec `json:"external,omitempty"`
}

// ExternalAuthorizerSpec is an ext_authz gRPC authorizer. Plaintext reaches only loopback or a
// unix socket (the answer on the connection is the decision): a remote address needs tls.
// +kubebuilder:validation:XValidation:rule=`has(self.tls) || self.address.matches('^((unix|unix-abstract):.+|((dns|passthrough):///)?(localhost|127\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}|\\[::1\\]):[0-9]{1,5})$')`,message="external.address: plaintext only to localhost, 127.0.0.0/8, [::1] or unix:; set external.tls for a remote authorizer",fieldPath=".address"
type ExternalAuthorizerSpec struct {
	// Address is a gRPC target: host:port, dns:///host:port or unix:///path.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule=`self.matches('^((unix|unix-abstract):.+|((dns|passthrough):///)?[^/\\s]+:[0-9]{1,5})$')`,message="external.address: not host:port, dns:///host:port or unix:///path"
	Address string `json:"address"`

	// Timeout bounds the wait for a decision, 10ms to 5s (a duration: 200ms, 1s). Default 200ms.
	// No answer in time is no decision: denied, unless failOpen.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[0-9]+(\\.[0-9]+)?(ms|s)$') && duration(self) >= duration('10ms') && duration(self) <= duration('5s')`,message="external.timeout: a duration from 10ms to 5s (200ms, 1s)"
	Timeout string `json:"timeout,omitempty"`

	// FailOpen allows a request when the authorizer gives no decision (a timeout, a refused
	// connection, an unknown answer). An explicit denial still denies. Default false.
	// +optional
	FailOpen *bool `json:"failOpen,omitempty"`

	// TLS to the authorizer. Required for an address that is not loopback or a unix socket.
	// +optional
	TLS *ExternalAuthorizerTLS `json:"tls,omitempty"`
}

// ExternalAuthorizerTLS is the TLS of the connection to the external authorizer.
type ExternalAuthorizerTLS struct {
	// CABundle is the PEM certificates the authorizer's certificate must chain to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=65536
	CABundle string `json:"caBundle"`

	// ServerName is the name the authorizer's certificate must carry (default: the address's
	// host).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`
}

// AuthorizationRule is one named rule: when the CEL expression When is true, Effect applies.
type AuthorizationRule struct {
	// Name of the rule, unique in the policy: a DNS label other than "default" (which names the
	// default in decisions).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self != 'default'",message="default is reserved: it names the policy's default in decisions"
	Name string `json:"name"`

	// Effect when the rule matches: Allow or Deny.
	// +kubebuilder:validation:Enum=Allow;Deny
	Effect string `json:"effect"`

	// When is a CEL expression over subject, caller, chain, scopes, audience, groups, claims,
	// request.method, request.path and request.rpcMethod that must be a bool. It is compiled at
	// admission (the webhook) with the environment the proxy uses.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	When string `json:"when"`
}

// ValidationSpec configures inbound token validation.
type ValidationSpec struct {
	// Enabled turns token validation on or off. Default true.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Issuer expected in the iss claim. Default {keycloak url}/realms/{realm}.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="must be an http or https URL with a host"
	Issuer string `json:"issuer,omitempty"`

	// JWKSURL the signing keys are fetched from.
	// Default {keycloak url}/realms/{realm}/protocol/openid-connect/certs.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="must be an http or https URL with a host"
	JWKSURL string `json:"jwksUrl,omitempty"`

	// Audience expected in the aud claim; "self" means the workload's own SPIFFE ID.
	// Default: the workload's SPIFFE ID.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Audience string `json:"audience,omitempty"`

	// RequiredScopes every incoming token must carry.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[^\s]+$`
	RequiredScopes []string `json:"requiredScopes,omitempty"`

	// JWKSRefreshSeconds is how often the signing keys are fetched again; a token signed by a key
	// the proxy does not hold fetches them at once whatever this says. Default 600.
	// +optional
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	JWKSRefreshSeconds *int32 `json:"jwksRefreshSeconds,omitempty"`
}

// OutboundSpec configures outbound traffic.
type OutboundSpec struct {
	// Enabled turns outbound handling on or off. Default true.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// TrafficInterception configures the iptables redirect of outgoing traffic to the proxy.
	// +optional
	TrafficInterception *TrafficInterceptionSpec `json:"trafficInterception,omitempty"`

	// TokenExchange configures the exchange of tokens for outgoing requests.
	// +optional
	TokenExchange *OutboundTokenExchangeSpec `json:"tokenExchange,omitempty"`

	// Egress says which destinations the workload may call at all (docs/authorization.md,
	// "Egress policy"). Without it every destination is allowed.
	// +optional
	Egress *EgressSpec `json:"egress,omitempty"`
}

// EgressSpec is the workload's egress policy, enforced by the outbound proxy on what it can verify
// of each connection: a destination an allow rule matches is reached, any other gets the default.
type EgressSpec struct {
	// Default is what happens to a destination no rule allows: Allow (today's behaviour) or Deny
	// (fail closed). Default Allow.
	// +optional
	// +kubebuilder:validation:Enum=Allow;Deny
	Default string `json:"default,omitempty"`

	// Allow lists the destinations the workload may reach; the first match allows.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Allow []EgressRule `json:"allow,omitempty"`

	// DryRun logs (audits) what the policy would deny and lets the traffic through. Default false.
	// +optional
	DryRun *bool `json:"dryRun,omitempty"`
}

// EgressRule allows one kind of destination: exactly one of host, cidr and agent.
//
// +kubebuilder:validation:XValidation:rule="[has(self.host), has(self.cidr), has(self.agent)].filter(x, x).size() == 1",message="exactly one of host, cidr and agent must be set",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.host) || !has(self.ports) || !self.host.contains(':')",message="a host with :port and ports together: name the ports in one place",fieldPath=".ports",reason="FieldValueInvalid"
type EgressRule struct {
	// Host of the destination, optionally with a port; * matches any run of characters
	// (e.g. *.svc.cluster.local), as in destinationRules. It matches a name the destination
	// address verifiably answers to (the request's Host or the TLS SNI, resolved), never an
	// address: use cidr for those.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9*]([-A-Za-z0-9.*]*[A-Za-z0-9*])?(:[0-9]{1,5})?$`
	Host string `json:"host,omitempty"`

	// CIDR of destination addresses, e.g. 10.96.0.0/12 or 2001:db8::/32; the only rule form that
	// matches a connection without a verifiable name (raw TCP, TLS without SNI).
	// +optional
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.0.0.0/8 or 2001:db8::/32"
	CIDR string `json:"cidr,omitempty"`

	// Agent names an in-cluster agent by its Service: it allows the names name, name.namespace,
	// name.namespace.svc and name.namespace.svc.cluster.local.
	// +optional
	Agent *EgressAgent `json:"agent,omitempty"`

	// Ports the rule allows; all when empty.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	Ports []int32 `json:"ports,omitempty"`
}

// EgressAgent is an agent's Service.
type EgressAgent struct {
	// Name of the agent's Service.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Namespace of the Service; default the TokenExchange's namespace.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// TrafficInterceptionSpec configures the interception of outgoing traffic.
//
// +kubebuilder:validation:XValidation:rule="!has(self.proxyUid)",message="proxyUid is not supported: the proxies run as the injector's proxy UID (its identity.proxyUID, default 1337), the one UID the interception rules let through; a different value would redirect the proxies' own traffic to themselves. Remove this field",fieldPath=".proxyUid",reason="FieldValueForbidden"
type TrafficInterceptionSpec struct {
	// Enabled turns interception on or off. Default true.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// ProxyPort outgoing traffic is redirected to. Default 15123.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ProxyPort *int32 `json:"proxyPort,omitempty"`

	// ProxyUID is rejected: the proxies run as the injector's proxy UID (identity.proxyUID in its
	// configuration), which the interception rules must skip, and a TokenExchange cannot change
	// the pod's security context. The field stays in the schema only so that a manifest setting it
	// is refused with that explanation rather than pruned.
	// +optional
	ProxyUID *int64 `json:"proxyUid,omitempty"`

	// ExcludePorts are outbound destination ports that are not intercepted. The inbound port is
	// always excluded.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	ExcludePorts []int32 `json:"excludePorts,omitempty"`
}

// OutboundTokenExchangeSpec configures RFC 8693 token exchange for outgoing requests.
type OutboundTokenExchangeSpec struct {
	// Enabled turns token exchange on or off; when off every destination is passed through. Default true.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// TokenURL of the token endpoint. Default {keycloak url}/realms/{realm}/protocol/openid-connect/token.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="must be an http or https URL with a host"
	TokenURL string `json:"tokenUrl,omitempty"`

	// Delegation says what the identity provider does with a delegation chain. chained: it
	// verifies an actor token and nests the subject token's act claims (RFC 8693 §4.1) — the
	// outbound proxy sends the workload's JWT SVID as actor_token and every hop is in the signed
	// token; immediateCaller: it does not (or is not known to), no actor token is sent, and a
	// callee knows only its immediate caller. Default immediateCaller.
	// +optional
	// +kubebuilder:validation:Enum=chained;immediateCaller
	Delegation string `json:"delegation,omitempty"`

	// DefaultTarget is used for destinations no rule matches, and fills in what a rule leaves out.
	// Default audience downstream-service, no scopes.
	// +optional
	DefaultTarget *ExchangeTarget `json:"defaultTarget,omitempty"`

	// DestinationRules choose the exchanged token per destination host; the first match wins.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(r, self.exists_one(o, o.match.host == r.match.host))",message="destination rule hosts must be unique"
	DestinationRules []DestinationRule `json:"destinationRules,omitempty"`
}

// ExchangeTarget is what a token is exchanged for.
type ExchangeTarget struct {
	// Audience of the exchanged token.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Audience string `json:"audience,omitempty"`

	// Scopes requested for the exchanged token.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[^\s]+$`
	Scopes []string `json:"scopes,omitempty"`

	// AllowScopeEscalation lets the exchange ask for scopes the caller's token does not carry, the
	// identity provider deciding. Default false: the outbound proxy refuses such a request (403
	// scope_not_delegated), so that scopes only narrow along a delegation chain. A rule's target
	// inherits defaultTarget's.
	// +optional
	AllowScopeEscalation *bool `json:"allowScopeEscalation,omitempty"`
}

// EffectiveDelegation is spec.outbound.tokenExchange.delegation, immediateCaller when unset.
func (s *TokenExchangeSpec) EffectiveDelegation() string {
	if s.Outbound != nil && s.Outbound.TokenExchange != nil && s.Outbound.TokenExchange.Delegation != "" {
		return s.Outbound.TokenExchange.Delegation
	}
	return "immediateCaller"
}

// EffectiveMTLS is spec.mtls.mode, off when unset.
func (s *TokenExchangeSpec) EffectiveMTLS() string {
	if s.MTLS != nil && s.MTLS.Mode != "" {
		return s.MTLS.Mode
	}
	return MTLSOff
}

// RegistersWithSVID reports whether kagenti-tokenexchange registers the workload's client
// (clientRegistration.clientAuthentication jwtSVID, registration not turned off).
func (s *TokenExchangeSpec) RegistersWithSVID() bool {
	cr := s.ClientRegistration
	return cr != nil && cr.ClientAuthentication == ClientAuthJWTSVID && (cr.Enabled == nil || *cr.Enabled)
}

// DestinationRule selects the token for requests to one host.
type DestinationRule struct {
	// Match selects the destination.
	Match DestinationMatch `json:"match"`

	// Target of the exchange for matching requests; fields left out come from defaultTarget.
	// Without a target, matching requests are passed through with their original token.
	// +optional
	Target *ExchangeTarget `json:"target,omitempty"`
}

// DestinationMatch selects destinations.
type DestinationMatch struct {
	// Host of the destination, optionally with a port; * matches any run of characters
	// (e.g. *.svc.cluster.local).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9*]([-A-Za-z0-9.*]*[A-Za-z0-9*])?(:[0-9]{1,5})?$`
	Host string `json:"host"`
}

// Phases of a TokenExchange.
const (
	PhasePending = "Pending"
	PhaseActive  = "Active"
	PhaseError   = "Error"
)

// Condition types: Ready (with Reconciling and Stalled, see duck.Status) summarises the
// TokenExchange; TargetResolved and ConfigMapReady are tokenexchange's own.
const (
	// ConditionReady: the ConfigMap is written for an injected workload and this TokenExchange is
	// the one in effect for it.
	ConditionReady = duck.ConditionReady
	// ConditionTargetResolved: spec.targetRef names an existing workload with a pod template.
	ConditionTargetResolved = "TargetResolved"
	// ConditionConfigMapReady: the ConfigMap {workload}-token-exchange holds this spec.
	ConditionConfigMapReady = "ConfigMapReady"
	// ConditionConfigPropagated: every running pod of the workload runs the ConfigMap's current
	// content, as its identity sidecars report (GET /status). False names the pods that do not,
	// and why: not updated yet (Propagating), rejected (ConfigRejected), not answering
	// (StatusUnavailable), or refusing another workload's client (ClientOwnedElsewhere).
	ConditionConfigPropagated = "ConfigPropagated"
	// ConditionStartupSettingsCurrent: no pod runs old values of the settings that take effect
	// only when a pod starts (ports, outbound.trafficInterception, spiffe-helper's). False
	// (RestartRequired) names the pods to restart.
	ConditionStartupSettingsCurrent = "StartupSettingsCurrent"
	// ConditionClientRegistered: kagenti-tokenexchange registered the workload's client
	// (clientAuthentication jwtSVID only).
	ConditionClientRegistered = "ClientRegistered"
)

// Reasons of the Ready condition, and of Reconciling or Stalled next to it. A Ready=False reason is
// either Reconciling (it resolves by itself: kstatus InProgress, Argo CD Progressing) or Stalled
// (nothing changes until someone changes the TokenExchange, its workload or the cluster: kstatus
// Failed, Argo CD Degraded). Target resolution adds duck.ReasonTargetNotFound (Reconciling: the
// workload is watched), duck.ReasonUnsupportedKind and duck.ReasonInvalidTargetRef (Stalled).
const (
	// ReasonConfigured: Ready=True (and ConfigMapReady=True): the configuration is in effect.
	ReasonConfigured = "Configured"
	// ReasonNotInjected (Stalled): the workload's pod template has no injection-status annotation;
	// the injector acts only when the workload is created or updated with its label.
	ReasonNotInjected = "NotInjected"
	// ReasonConflict (Stalled): an older TokenExchange configures the same workload.
	ReasonConflict = "Conflict"
	// ReasonInvalidSpec (Stalled): the stored spec fails validation (stored under an older CRD).
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonConfigMapNotOwned (Stalled): a ConfigMap of that name belongs to someone else. The
	// controller checks again every 15 s and recovers once it is gone.
	ReasonConfigMapNotOwned = "ConfigMapNotOwned"
	// ReasonApplyFailed (Reconciling): the API server refused the ConfigMap write; retried.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonClientOwnedElsewhere (Stalled, and ConfigPropagated=False): the client-registration
	// sidecar found the client it would register under the rendered name owned by another
	// workload, or by none (made by hand or by an older kagenti-authbridge), and left it
	// untouched: the pods get no credentials until clientNameTemplate changes or a person adopts
	// the client (docs/identity.md, "Client registration").
	ReasonClientOwnedElsewhere = "ClientOwnedElsewhere"
)

// Reasons of the other conditions.
const (
	// ReasonResolved (TargetResolved=True): the workload exists and has a pod template.
	ReasonResolved = "Resolved"
	// ReasonWaitingForTarget (ConfigMapReady=False): nothing is written until the target resolves.
	ReasonWaitingForTarget = "WaitingForTarget"
	// ReasonNoPods, ReasonPropagated, ReasonPropagating, ReasonConfigRejected, ReasonStatusUnavailable
	// (ConfigPropagated): whether the pods' sidecars run the ConfigMap's current content.
	ReasonNoPods            = "NoPods"
	ReasonPropagated        = "Propagated"
	ReasonPropagating       = "Propagating"
	ReasonConfigRejected    = "ConfigRejected"
	ReasonStatusUnavailable = "StatusUnavailable"
	// ReasonCurrent, ReasonRestartRequired (StartupSettingsCurrent): whether the pods run the
	// pod-start settings (traffic interception) of the current content.
	ReasonCurrent         = "Current"
	ReasonRestartRequired = "RestartRequired"
	// ReasonRestarting (StartupSettingsCurrent): pods that started before their ConfigMap existed
	// are being restarted by the controller (evicted, for their controller to start again).
	ReasonRestarting = "Restarting"
	// ReasonRegistered (ClientRegistered=True): the provider accepted the registration.
	ReasonRegistered = "Registered"
	// ReasonRegistrarUnavailable (ClientRegistered=False, and Ready=False Stalled):
	// kagenti-tokenexchange has no SPIFFE identity to register with (started without
	// --registrar-spiffe-socket), or cannot get its JWT SVID from the SPIRE agent (retried).
	ReasonRegistrarUnavailable = "RegistrarUnavailable"
	// ReasonRegistrationFailed (ClientRegistered=False, and Ready=False Reconciling): the provider
	// was unreachable or answered with an error; retried with backoff.
	ReasonRegistrationFailed = "RegistrationFailed"
	// ReasonRegistrationRefused (ClientRegistered=False, and Ready=False Reconciling): the
	// provider refused the registration or answered with something the controller does not use
	// (a client secret, another workload's owner marker or SPIFFE ID); retried with backoff.
	ReasonRegistrationRefused = "RegistrationRefused"
)

// TokenExchangeStatus is the observed state.
type TokenExchangeStatus struct {
	// observedGeneration and conditions: Ready (the summary), Reconciling or Stalled (present only
	// while True), TargetResolved and ConfigMapReady.
	duck.Status `json:",inline"`

	// Phase summarises the state: Pending (waiting for the workload or its injection), Active
	// (configuration in effect) or Error (needs a fix: invalid spec, conflict, unsupported kind).
	// +optional
	// +kubebuilder:validation:Enum=Pending;Active;Error
	Phase string `json:"phase,omitempty"`

	// Message is a human summary of the state.
	// +optional
	Message string `json:"message,omitempty"`

	// Delegation is what a callee of this workload's calls can rely on: chained (the identity
	// provider verifies each hop and nests act, so the whole chain is in the signed token) or
	// immediateCaller (only the immediate caller is known). It reflects
	// spec.outbound.tokenExchange.delegation, which the administrator sets for the provider: OAuth
	// metadata has no flag to discover it.
	// +optional
	// +kubebuilder:validation:Enum=chained;immediateCaller
	Delegation string `json:"delegation,omitempty"`

	// MTLS is the mutual TLS mode between the workload's sidecars and other kagenti sidecars:
	// off, permissive or strict (spec.mtls.mode, default off). A pod takes a change at its next
	// start: until then it is among the pods pending a restart for mtls.mode.
	// +optional
	// +kubebuilder:validation:Enum=off;permissive;strict
	MTLS string `json:"mtls,omitempty"`

	// ConfigMapName is the ConfigMap holding the rendered configuration.
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`

	// ConfiguredPods counts the running pods of the workload whose identity sidecars run the
	// ConfigMap's current content (contentHash), as they report it.
	// +optional
	ConfiguredPods int32 `json:"configuredPods"`

	// Pods counts the running pods of the workload that mount the ConfigMap, on the current
	// content or not.
	// +optional
	Pods int32 `json:"pods,omitempty"`

	// ContentHash is the kagenti.io/content-hash of the ConfigMap as last written: the content
	// a configured pod runs.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ContentHash string `json:"contentHash,omitempty"`

	// IdentityStatus reports the readiness of the identity sidecars across the pods that mount
	// the ConfigMap.
	// +optional
	IdentityStatus *IdentityStatus `json:"identityStatus,omitempty"`

	// ClientRegistration is the client kagenti-tokenexchange registered for the workload
	// (clientRegistration.clientAuthentication jwtSVID); absent otherwise.
	// +optional
	ClientRegistration *RegisteredClient `json:"clientRegistration,omitempty"`
}

// RegisteredClient is a client kagenti-tokenexchange registered with the identity provider. It
// holds no credential: the client authenticates with the workload's JWT SVID, and the RFC 7592
// registration access token the provider returns is not kept (whoever holds it may rebind the
// client), so the controller never updates or deletes a client it registered: a change of what
// is registered registers a new client, and the old one stays at the provider until removed there.
type RegisteredClient struct {
	// ClientID the provider assigned.
	// +kubebuilder:validation:MaxLength=512
	ClientID string `json:"clientId"`
	// ClientName it was registered under.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ClientName string `json:"clientName,omitempty"`
	// SpiffeID the client is bound to: only a JWT SVID of this ID authenticates it.
	// +kubebuilder:validation:MaxLength=2048
	SpiffeID string `json:"spiffeId"`
	// RegistrationURL is the RFC 7591 endpoint it was registered at.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	RegistrationURL string `json:"registrationUrl,omitempty"`
	// Registrar is the SPIFFE ID kagenti-tokenexchange authenticated the registration with.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Registrar string `json:"registrar,omitempty"`
	// MetadataHash identifies what was registered (endpoint, name, owner, SPIFFE ID, grants): the
	// controller registers again only when it changes.
	// +kubebuilder:validation:MaxLength=64
	MetadataHash string `json:"metadataHash"`
	// RegisteredAt is when the provider accepted the registration.
	// +optional
	RegisteredAt *metav1.Time `json:"registeredAt,omitempty"`
}

// IdentityStatus is true for a component when its sidecar is ready in every configured pod (and
// there is at least one).
type IdentityStatus struct {
	// SpiffeEnabled: spiffe-helper is ready, the workload holds a SPIFFE identity.
	SpiffeEnabled bool `json:"spiffeEnabled"`
	// IdpRegistered: client-registration is ready, the workload is registered with the IdP.
	IdpRegistered bool `json:"idpRegistered"`
	// InboundProxyReady: auth-proxy is ready.
	InboundProxyReady bool `json:"inboundProxyReady"`
	// OutboundProxyReady: envoy-proxy is ready.
	OutboundProxyReady bool `json:"outboundProxyReady"`
}

// GetStatus returns the status model shared by every Kagenti resource.
func (t *TokenExchange) GetStatus() *duck.Status { return &t.Status.Status }

// GetTargetRef implements duck.Referrer.
func (t *TokenExchange) GetTargetRef() *duck.TargetRef { return &t.Spec.TargetRef }

// +kubebuilder:object:root=true

// TokenExchangeList is a list of TokenExchanges.
type TokenExchangeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TokenExchange `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TokenExchange{}, &TokenExchangeList{})
}
