package contract

// Suffixes of the objects derived from a workload's name (docs/architecture.md §5, §6); the names
// themselves are derived by pkg/configmap (TokenExchangeName, TraceName, ...), which hashes a name
// too long for an object.
const (
	SuffixTokenExchange = "token-exchange"
	SuffixTrace         = "trace"
	SuffixAgentPolicy   = "agent-policy"
	SuffixCard          = "card"
)

// Labels and annotations on the objects controllers derive (docs/architecture.md §4, §6).
const (
	// PartOfLabel is app.kubernetes.io/part-of; its value on derived objects is PartOf.
	PartOfLabel = "app.kubernetes.io/part-of"
	PartOf      = "kagenti"
	// ComponentLabel is app.kubernetes.io/component: what a derived object is within Kagenti
	// (trace-config, token-exchange, ...), set by the pillar that writes it.
	ComponentLabel = "app.kubernetes.io/component"
	// ComponentTokenExchange is the ComponentLabel of {workload}-token-exchange, the ConfigMap
	// tokenexchange writes (agentcard's discovery API watches the ConfigMaps carrying it).
	ComponentTokenExchange = "token-exchange"
	// TokenExchangeConfigFile is the key of {workload}-token-exchange holding config.yaml.
	TokenExchangeConfigFile = "config.yaml"
	// InjectionStatusAnnotation is the injector's record, on a pod template, of what it injected
	// (JSON): the injector writes it, tokenexchange and agenttrace read it to count configured pods.
	InjectionStatusAnnotation = "kagenti.io/injection-status"
	// IdentityDefaultsAnnotation is the injector's identity defaults for a workload, NAME=VALUE
	// lines, on the pod template; the data plane reads it through VolumeIdentity.
	IdentityDefaultsAnnotation = "kagenti.io/identity-defaults"
	// ManagedByLabel marks objects a Kagenti controller created; its value is kagenti-<pillar>.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ContentHashAnnotation records, on a ConfigMap a controller wrote, the hash of its data and
	// binaryData as last written (pkg/duck/kit's Applier).
	ContentHashAnnotation = "kagenti.io/content-hash"
)

// What the injector adds to a pod template, by name (docs/architecture.md §5). The controllers find
// their mounts in pods by these names; users may exclude components by name.
const (
	// Volumes.
	VolumeShared      = "kagenti-shared"
	VolumeSpireSocket = "spire-agent-socket"
	VolumeTrace       = "kagenti-trace"
	// VolumeIdPCredentials is the optional Secret with the identity provider's registration
	// credentials, mounted into client-registration only.
	VolumeIdPCredentials = "kagenti-idp-credentials"
	// VolumeIdentity is, since injection status v4, the projected volume of everything the data
	// plane reads about its workload, mounted at PathIdentity into proxy-init and the authbridge
	// container: from the downward API the identity defaults (IdentityDefaultsFile, from the pod
	// annotation IdentityDefaultsAnnotation), IdentityPodNamespaceFile and, only when the pod's
	// hostname is not its name, IdentityPodNameFile; and the optional ConfigMap
	// {workload}-token-exchange (pkg/configmap.TokenExchangeName), whose one key config.yaml sits beside them.
	// Injections v1 to v3 made it a downward-API volume, and mounted the ConfigMap separately
	// (VolumeTokenExchange).
	VolumeIdentity = "kagenti-identity"
	// VolumeTokenExchange is the ConfigMap volume {workload}-token-exchange of injections v1 to v3,
	// mounted at PathTokenExchange. The injector no longer adds it (v4 projects the ConfigMap into
	// VolumeIdentity) but strips it from the templates those versions injected, and the
	// tokenexchange controller still finds the ConfigMap of their pods by it.
	VolumeTokenExchange = "kagenti-token-exchange"

	// Where they are mounted.
	PathShared      = "/shared"
	PathSpireSocket = "/run/spire/agent-sockets"
	PathTrace       = "/etc/kagenti/trace"
	// PathIdPCredentials is where client-registration reads VolumeIdPCredentials.
	PathIdPCredentials = "/etc/kagenti/idp-credentials"
	PathIdentity       = "/etc/kagenti/identity"
	// PathTokenExchange is where injections v1 to v3 mounted VolumeTokenExchange.
	PathTokenExchange = "/etc/kagenti/token-exchange"
	// IdentityDefaultsFile is VolumeIdentity's file of NAME=VALUE lines.
	IdentityDefaultsFile = "defaults.env"
	// IdentityPodNameFile and IdentityPodNamespaceFile are VolumeIdentity's files of the pod's
	// name (metadata.name) and namespace, named after the variables that may set them instead.
	IdentityPodNameFile      = "POD_NAME"
	IdentityPodNamespaceFile = "POD_NAMESPACE"
	// PathHelperConf is spiffe-helper's configuration, which proxy-init renders into the shared
	// volume from the merged identity configuration and spiffe-helper reads (-config).
	PathHelperConf = PathShared + "/helper.conf"

	// Components (container names; the values kagenti.io/exclude-components takes).
	ComponentProxyInit          = "proxy-init"
	ComponentSpiffeHelper       = "spiffe-helper"
	ComponentClientRegistration = "client-registration"
	ComponentAuthProxy          = "auth-proxy"
	ComponentEnvoyProxy         = "envoy-proxy"
)

// Everything the injector may add to a pod template, by name. An injection status (v2 to v4)
// records only the exceptions to these lists (the names a template already had, kept as written),
// so they are part of its format: a name added here is a new status version (docs/injector.md).
//   - InjectedComponents: the components, the values kagenti.io/exclude-components takes, and the
//     containers a v2 status is about (each component had one).
//   - InjectedContainers: the containers a v3 or v4 status is about (the three long-running roles
//     share ContainerAuthbridge).
//   - InjectedVolumes: the volumes (v2 to v4; VolumeTokenExchange only up to v3).
var (
	InjectedComponents = []string{ComponentProxyInit, ComponentSpiffeHelper, ComponentClientRegistration, ComponentAuthProxy, ComponentEnvoyProxy}
	InjectedContainers = []string{ComponentProxyInit, ComponentSpiffeHelper, ContainerAuthbridge}
	InjectedVolumes    = []string{VolumeShared, VolumeSpireSocket, VolumeTokenExchange, VolumeIdentity, VolumeIdPCredentials, VolumeTrace}
)

// Ports the data plane listens on in every pod besides the proxies' own: kagenti-authbridge's status
// servers (/healthz, /readyz, /status) per role, and spiffe-helper's health listener. proxy-init
// never redirects them; the injector refuses a user container that declares one.
const (
	StatusPortRegister     = 15124
	StatusPortInbound      = 15125
	StatusPortOutbound     = 15126
	HealthPortSpiffeHelper = 15127
	// StatusPortAuthbridge is the status server of the one container that runs several roles
	// (ContainerAuthbridge): /healthz and /readyz answer for every role it runs.
	StatusPortAuthbridge = 15128
)

// MTLSALPN is the TLS application protocol (ALPN, RFC 7301) of mutual TLS to a kagenti-authbridge
// inbound proxy (mtls.mode permissive or strict): HTTP/1.1 or h2c travels inside, as on a
// plaintext connection. The inbound's TLS server selects only this protocol, so a client that
// offers only others (h2, http/1.1: a browser, curl) fails the handshake instead of being answered
// by a proxy it did not mean to reach. It is offered by the outbound proxy, which also requires it
// back (that is how a caller knows it reached a sidecar), and by agentcard's attested card fetch.
const MTLSALPN = "kagenti-mtls/1"

// The data plane's programs as the injector starts them: the kagenti-authbridge subcommand each
// component runs. The injector sets these arguments; kagenti-authbridge defines the subcommands.
var AuthbridgeRoles = map[string]string{
	ComponentProxyInit:          "init",
	ComponentClientRegistration: "register",
	ComponentAuthProxy:          "inbound",
	ComponentEnvoyProxy:         "outbound",
}

// The long-running roles (client-registration, auth-proxy, envoy-proxy: those a workload does not
// exclude) run in one container and one process, `kagenti-authbridge sidecar <role>...`, instead
// of one container each: one Go runtime per pod instead of three, and a third of the bytes in
// every stored template. proxy-init stays an init container of its own (it needs NET_ADMIN and
// root), spiffe-helper a sidecar of its own (an upstream program).
const (
	ContainerAuthbridge      = "authbridge"
	AuthbridgeSidecarCommand = "sidecar"
)

// SidecarRoles are the roles `kagenti-authbridge sidecar` may run, in the order it starts them
// (registration first: the proxies use the credentials it writes).
var SidecarRoles = []string{"register", "inbound", "outbound"}

// ComponentsOfContainer returns the components a container of an injected pod runs: its own name
// for a container named after a component (how injectors before the combined sidecar rendered
// them, and spiffe-helper), the roles in its arguments for ContainerAuthbridge, nil otherwise.
func ComponentsOfContainer(name string, args []string) []string {
	if name == ContainerAuthbridge {
		if len(args) == 0 || args[0] != AuthbridgeSidecarCommand {
			return nil
		}
		var components []string
		for _, role := range args[1:] {
			if c := componentOfRole(role); c != "" {
				components = append(components, c)
			}
		}
		return components
	}
	for _, c := range InjectedComponents {
		if c == name {
			return []string{name}
		}
	}
	return nil
}

// componentOfRole is the component whose kagenti-authbridge subcommand is role, or "".
func componentOfRole(role string) string {
	for c, r := range AuthbridgeRoles {
		if r == role {
			return c
		}
	}
	return ""
}

// The delegation graph's edges, as each inbound proxy counts them: kagenti-authbridge serves the
// counter MetricCalls at MetricsPath on StatusPortInbound, one series per (caller, via, result);
// kagenti describe and agentcard's discovery API read it (pkg/configmap/callgraph).
const (
	MetricsPath = "/metrics"
	MetricCalls = "kagenti_authbridge_calls_total"
	// CallsCaller is the immediate caller (the token's client or its current actor).
	CallsCaller = "caller"
	// CallsVia lists the workloads before the caller in the token's delegation chain,
	// comma-separated, the caller's own caller first and the first actor last.
	CallsVia    = "via"
	CallsResult = "result"
	CallAllowed = "allowed"
	CallDenied  = "denied"
)
