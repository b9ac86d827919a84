// Package config is the injector's own configuration: the file config.yaml of the ConfigMap
// kagenti-injector, hot-reloaded by the binary. It holds everything the admission path needs, so the
// admission path makes no API calls (docs/architecture.md §5).
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/configmap/identity"
)

// Names of the injected components (docs/architecture.md §5), in injection order.
const (
	ProxyInit          = "proxy-init"
	SpiffeHelper       = "spiffe-helper"
	ClientRegistration = "client-registration"
	AuthProxy          = "auth-proxy"
	EnvoyProxy         = "envoy-proxy"
)

// Components lists every component name in injection order: the names
// kagenti.io/exclude-components takes.
var Components = []string{ProxyInit, SpiffeHelper, ClientRegistration, AuthProxy, EnvoyProxy}

// Authbridge is the one container that runs the long-running roles of client-registration,
// auth-proxy and envoy-proxy (contract.ContainerAuthbridge): one process, one Go runtime.
const Authbridge = contract.ContainerAuthbridge

// Containers lists the containers the injector may add, in injection order: the keys of
// components (their resources) and of the resource annotations kagenti.io/<container>-cpu, ....
var Containers = []string{ProxyInit, SpiffeHelper, Authbridge}

// combinedRoles are the components whose roles the authbridge container runs: since it does,
// they have no container, and so no resources, of their own.
var combinedRoles = []string{ClientRegistration, AuthProxy, EnvoyProxy}

// IsContainer reports whether name is one of Containers.
func IsContainer(name string) bool {
	for _, c := range Containers {
		if c == name {
			return true
		}
	}
	return false
}

// IsCombinedRole reports whether name is a component the authbridge container runs.
func IsCombinedRole(name string) bool {
	for _, c := range combinedRoles {
		if c == name {
			return true
		}
	}
	return false
}

// IsComponent reports whether name is one of Components.
func IsComponent(name string) bool {
	for _, c := range Components {
		if c == name {
			return true
		}
	}
	return false
}

// Sidecar modes.
const (
	// SidecarNative injects sidecars as init containers with restartPolicy Always (Kubernetes
	// native sidecars): Jobs complete, and identity is ready before the agent starts.
	SidecarNative = "native"
	// SidecarClassic appends the sidecars to the pod's containers.
	SidecarClassic = "classic"
)

// SPIRE agent socket volume types.
const (
	SocketCSI      = "csi"
	SocketHostPath = "hostPath"
)

// Config is config.yaml.
type Config struct {
	// SidecarMode is native (default) or classic.
	SidecarMode string `json:"sidecarMode"`
	// ImagePullPolicy of every injected container (default IfNotPresent).
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy"`
	// Images are the two programs every component runs: kagenti-authbridge (proxy-init,
	// client-registration, auth-proxy, envoy-proxy) and spiffe-helper. The one place to set the
	// registry and tag of the data plane.
	Images Images `json:"images"`
	// Components holds the resources of each injected container, keyed by container name
	// (Containers: proxy-init, spiffe-helper, authbridge).
	Components map[string]Component `json:"components"`
	// SpireSocket says how the SPIRE agent socket reaches the pod.
	SpireSocket SpireSocket `json:"spireSocket"`
	// Identity holds the defaults passed to the sidecars as environment variables.
	Identity Identity `json:"identity"`
	// RewriteAppProbes (default true) rewrites the probes of the user's containers that the inbound
	// interception catches into GETs on the authbridge container's status port, which runs them
	// against the app on loopback (docs/injector.md, "The agent's probes"); false leaves every
	// probe as written. A workload opts out with kagenti.io/rewrite-app-probes: "false".
	RewriteAppProbes bool `json:"rewriteAppProbes"`
	// Interception is how the workloads' traffic reaches the proxies unless a workload's label
	// kagenti.io/interception says otherwise: transparent (default; proxy-init's nftables
	// redirects, NET_ADMIN) or proxy (HTTP_PROXY on the agent's containers, no init container and
	// no added capability: docs/identity.md, "Interception modes").
	Interception string `json:"interception"`
}

// Interception modes (Config.Interception, the workload label kagenti.io/interception).
const (
	InterceptionTransparent = "transparent"
	InterceptionProxy       = "proxy"
)

// Images are pinned by tag or digest (":latest" and untagged images are rejected).
type Images struct {
	// Authbridge is kagenti-authbridge, the tokenexchange data plane, at the platform's release tag.
	Authbridge string `json:"authbridge"`
	// SpiffeHelper is the upstream spiffe-helper.
	SpiffeHelper string `json:"spiffeHelper"`
}

// Image returns the image of component name.
func (i Images) Image(name string) string {
	if name == SpiffeHelper {
		return i.SpiffeHelper
	}
	return i.Authbridge
}

// Component is one injected container's settings (the key "components" predates the combined
// authbridge container, when every component had a container of its own).
type Component struct {
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// SpireSocket is the volume spire-agent-socket.
type SpireSocket struct {
	// Type is csi (default, driver csi.spiffe.io) or hostPath.
	Type string `json:"type"`
	// CSIDriver is the CSI driver name (default csi.spiffe.io).
	CSIDriver string `json:"csiDriver,omitempty"`
	// HostPath is the directory on the node holding the socket, for type hostPath
	// (default /run/spire/agent-sockets).
	HostPath string `json:"hostPath,omitempty"`
}

// Identity holds the identity defaults of docs/architecture.md §5: the one source of the defaults the
// data plane (kagenti-authbridge) merges a TokenExchange's config.yaml over.
type Identity struct {
	TrustDomain string `json:"trustDomain"`
	// SocketPath is the SPIRE agent's Workload API socket, a plain path (no unix:// scheme), inside
	// the spire-agent-socket volume.
	SocketPath  string `json:"socketPath"`
	JWTAudience string `json:"jwtAudience"`
	// Provider is the identity provider the sidecars register with and exchange at: keycloak
	// (IdPURL and Realm, its admin REST API) or oidc (OIDC, RFC 7591 registration). A
	// TokenExchange may select the other one for its workload.
	Provider string `json:"provider"`
	// IdPURL and Realm locate Keycloak (required for provider keycloak).
	IdPURL string `json:"idpURL"`
	Realm  string `json:"realm"`
	// OIDC locates the OpenID provider (every URL required for provider oidc; with provider
	// keycloak, optional defaults for TokenExchanges that select oidc).
	OIDC OIDC `json:"oidc"`
	// ClientNameTemplate names the client registered for a workload: literal text with the
	// placeholders {{.Namespace}}, {{.WorkloadName}}, {{.ServiceAccount}}, {{.PodName}}.
	ClientNameTemplate string `json:"clientNameTemplate"`
	// IdPCredentialsSecret is the Secret, in the workload's namespace, with the identity
	// provider's registration credentials; mounted optional into client-registration.
	IdPCredentialsSecret string `json:"idpCredentialsSecret"`
	TokenExchange        bool   `json:"tokenExchange"`
	// InboundPort is where auth-proxy listens; TargetPort is the agent's port behind it.
	InboundPort int32 `json:"inboundPort"`
	TargetPort  int32 `json:"targetPort"`
	// OutboundPort is envoy-proxy's outbound listener; ProxyUID is the UID iptables skips.
	OutboundPort    int32  `json:"outboundPort"`
	ProxyUID        int64  `json:"proxyUID"`
	DefaultAudience string `json:"defaultAudience"`
	// JWKSRefreshSeconds is how often the inbound proxy fetches the signing keys again (10-86400).
	JWKSRefreshSeconds int32 `json:"jwksRefreshSeconds"`
}

// Identity providers of identity.provider.
const (
	ProviderKeycloak = "keycloak"
	ProviderOIDC     = "oidc"
)

// OIDC locates an OpenID provider; its URLs become KAGENTI_OIDC_* when set.
type OIDC struct {
	Issuer          string `json:"issuer,omitempty"`
	TokenURL        string `json:"tokenURL,omitempty"`
	JWKSURL         string `json:"jwksURL,omitempty"`
	RegistrationURL string `json:"registrationURL,omitempty"`
}

// Images of the platform's release (deploy/ overrides the registry and tag, as for the controllers).
const (
	DefaultAuthbridgeImage = "ghcr.io/kagenti/kagenti-authbridge:v0.1.0"
	// DefaultSpiffeHelperImage is the upstream release whose configuration format the data plane
	// renders (github.com/spiffe/spiffe-helper v0.11.0).
	DefaultSpiffeHelperImage = "ghcr.io/spiffe/spiffe-helper:0.11.0"
)

// Default returns the built-in configuration (the seed defaults of docs/architecture.md §5).
func Default() *Config {
	res := func(cpu, mem, memLimit string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(cpu),
				corev1.ResourceMemory: resource.MustParse(mem),
			},
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memLimit)},
		}
	}
	return &Config{
		SidecarMode:     SidecarNative,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Images:          Images{Authbridge: DefaultAuthbridgeImage, SpiffeHelper: DefaultSpiffeHelperImage},
		Components: map[string]Component{
			ProxyInit:    {Resources: res("10m", "16Mi", "64Mi")},
			SpiffeHelper: {Resources: res("10m", "16Mi", "64Mi")},
			// One process running register, inbound and outbound: one Go runtime and one set of
			// shared libraries instead of three, so less than the three containers' sum (50m,
			// 96Mi, 384Mi limit); the limit keeps the headroom of the two proxies' buffers under
			// load (docs/injector.md, "Resources").
			Authbridge: {Resources: res("40m", "64Mi", "256Mi")},
		},
		SpireSocket:      SpireSocket{Type: SocketCSI, CSIDriver: "csi.spiffe.io", HostPath: "/run/spire/agent-sockets"},
		RewriteAppProbes: true,
		Interception:     InterceptionTransparent,
		Identity: Identity{
			// The data plane's built-in defaults (package identity): the injector writes only
			// what differs from them into a workload's identity defaults.
			TrustDomain:          identity.TrustDomain,
			SocketPath:           "/run/spire/agent-sockets/agent.sock",
			JWTAudience:          "kagenti-agents",
			Provider:             ProviderKeycloak,
			IdPURL:               identity.IdPURL,
			Realm:                identity.Realm,
			ClientNameTemplate:   identity.ClientNameTemplate,
			IdPCredentialsSecret: "kagenti-idp-credentials",
			TokenExchange:        true,
			InboundPort:          identity.InboundPort,
			TargetPort:           identity.TargetPort,
			OutboundPort:         identity.OutboundPort,
			ProxyUID:             identity.ProxyUID,
			DefaultAudience:      identity.DefaultAudience,
			JWKSRefreshSeconds:   identity.JWKSRefreshSeconds,
		},
	}
}

// Parse reads config.yaml. Fields left out keep their default; unknown fields and invalid values
// are errors naming the field. An empty file yields Default().
func Parse(data []byte) (*Config, error) {
	c := Default()
	// Components are merged per component so a file may set only one image.
	var raw struct {
		Components map[string]json.RawMessage `json:"components"`
	}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("parsing config.yaml: %w", err)
	}
	defaults := Default().Components // c.Components is decoded into in place below
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, fmt.Errorf("parsing config.yaml: %w", err)
	}
	merged := map[string]Component{}
	for name, d := range defaults {
		merged[name] = d
	}
	for name, msg := range raw.Components {
		comp := defaults[name]
		if err := json.Unmarshal(msg, &comp); err != nil {
			return nil, fmt.Errorf("components.%s: %w", name, err)
		}
		merged[name] = comp
	}
	c.Components = merged
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate checks every field and returns all problems at once.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.SidecarMode {
	case SidecarNative, SidecarClassic:
	default:
		add("sidecarMode: %q is not one of native, classic", c.SidecarMode)
	}
	switch c.Interception {
	case InterceptionTransparent, InterceptionProxy:
	default:
		add("interception: %q is not one of transparent, proxy", c.Interception)
	}
	switch c.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		add("imagePullPolicy: %q is not one of Always, IfNotPresent, Never", c.ImagePullPolicy)
	}
	names := make([]string, 0, len(c.Components))
	for name := range c.Components {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		switch {
		case IsCombinedRole(name):
			// Refused rather than ignored: the file's resources would silently stop applying.
			add("components.%s: runs in the %s container with the other identity roles and has no resources of its own; set components.%s instead",
				name, Authbridge, Authbridge)
		case !IsContainer(name):
			add("components.%s: unknown container; accepted: %s", name, strings.Join(Containers, ", "))
		}
	}
	if err := validateImage(c.Images.Authbridge); err != nil {
		add("images.authbridge: %v", err)
	}
	if err := validateImage(c.Images.SpiffeHelper); err != nil {
		add("images.spiffeHelper: %v", err)
	}
	for _, name := range Containers {
		if _, ok := c.Components[name]; !ok {
			add("components.%s: missing", name)
		}
	}
	switch c.SpireSocket.Type {
	case SocketCSI:
		if c.SpireSocket.CSIDriver == "" {
			add("spireSocket.csiDriver: required for type csi")
		}
	case SocketHostPath:
		if !strings.HasPrefix(c.SpireSocket.HostPath, "/") {
			add("spireSocket.hostPath: %q must be an absolute path", c.SpireSocket.HostPath)
		}
	default:
		add("spireSocket.type: %q is not one of csi, hostPath", c.SpireSocket.Type)
	}
	id := c.Identity
	required := map[string]string{
		"identity.trustDomain": id.TrustDomain, "identity.socketPath": id.SocketPath,
		"identity.jwtAudience":     id.JWTAudience,
		"identity.defaultAudience": id.DefaultAudience, "identity.clientNameTemplate": id.ClientNameTemplate,
		"identity.idpCredentialsSecret": id.IdPCredentialsSecret,
	}
	urls := map[string]string{
		"identity.oidc.issuer": id.OIDC.Issuer, "identity.oidc.tokenURL": id.OIDC.TokenURL,
		"identity.oidc.jwksURL": id.OIDC.JWKSURL, "identity.oidc.registrationURL": id.OIDC.RegistrationURL,
	}
	providerRequired := map[string]string{}
	switch id.Provider {
	case ProviderKeycloak:
		providerRequired["identity.idpURL"], providerRequired["identity.realm"] = id.IdPURL, id.Realm
	case ProviderOIDC:
		providerRequired = urls
	default:
		add("identity.provider: %q is not one of keycloak, oidc", id.Provider)
	}
	for field, v := range required {
		if v == "" {
			add("%s: required", field)
		} else if strings.ContainsAny(v, "\n\r") {
			add("%s: must be one line", field)
		}
	}
	// A cluster-wide template without the namespace first would make two namespaces' workloads of
	// the same name share one client (and one secret) without anyone's malice; the same rule as
	// for a TokenExchange's template (identity.ValidateNamespacedClientName).
	if id.ClientNameTemplate != "" {
		if err := identity.ValidateNamespacedClientName(id.ClientNameTemplate); err != nil {
			add("identity.clientNameTemplate: %q %v", id.ClientNameTemplate, err)
		}
	}
	for field, v := range providerRequired {
		if v == "" {
			add("%s: required for identity.provider %s", field, id.Provider)
		}
	}
	for field, v := range map[string]string{"identity.idpURL": id.IdPURL, "identity.realm": id.Realm} {
		if strings.ContainsAny(v, "\n\r") {
			add("%s: must be one line", field)
		}
	}
	for field, v := range urls {
		if v != "" && !isHTTPURL(v) {
			add("%s: %q must be an http or https URL with a host", field, v)
		}
	}
	if id.SocketPath != "" && !strings.HasPrefix(id.SocketPath, contract.PathSpireSocket+"/") {
		add("identity.socketPath: %q must be a path in the spire-agent-socket volume, %s/ (no unix:// scheme)", id.SocketPath, contract.PathSpireSocket)
	}
	for field, p := range map[string]int32{
		"identity.inboundPort": id.InboundPort, "identity.targetPort": id.TargetPort, "identity.outboundPort": id.OutboundPort,
	} {
		if p < 1 || p > 65535 {
			add("%s: %d is not a port (1-65535)", field, p)
		}
	}
	if id.JWKSRefreshSeconds < 10 || id.JWKSRefreshSeconds > 86400 {
		add("identity.jwksRefreshSeconds: %d is not 10 to 86400 seconds", id.JWKSRefreshSeconds)
	}
	if id.ProxyUID < 1 {
		add("identity.proxyUID: %d must be a non-root UID", id.ProxyUID)
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// isHTTPURL accepts an absolute http or https URL with a host and nothing that does not fit on
// one line.
func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" && !strings.ContainsAny(s, " \t\n\r")
}

// validateImage accepts a reference pinned by digest or by a tag other than latest.
func validateImage(image string) error {
	if image == "" {
		return errors.New("required")
	}
	if strings.ContainsAny(image, " \t\n") {
		return fmt.Errorf("%q is not an image reference", image)
	}
	if strings.Contains(image, "@sha256:") {
		return nil
	}
	// The tag follows the last ':' after the last '/' (a ':' before it is a registry port).
	last := image[strings.LastIndex(image, "/")+1:]
	i := strings.LastIndex(last, ":")
	if i < 0 {
		return fmt.Errorf("%q is not pinned: add a tag or a digest", image)
	}
	if tag := last[i+1:]; tag == "" || tag == "latest" {
		return fmt.Errorf("%q is not pinned: use a version tag or a digest, not %q", image, tag)
	}
	return nil
}

// Hash identifies the configuration's content; it is recorded in the injection status so a changed
// configuration re-injects on the next update.
func (c *Config) Hash() string {
	b, _ := json.Marshal(c) // map keys are sorted by encoding/json: deterministic.
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
