package resources

// Defaults are the identity defaults of ARCHITECTURE.md §5: what the injector gives every workload
// when no TokenExchange exists. A TokenExchange spec is merged over them, so the rendered
// config.yaml is always complete. This is the only place in the module that knows them (the CRD's
// CEL port rules repeat the two default ports; keep them in step).
type Defaults struct {
	TrustDomain          string
	SocketPath           string
	JWTAudience          string
	OutputFormat         string
	KeycloakURL          string
	KeycloakRealm        string
	ClientNameTemplate   string
	TokenExchangeEnabled bool
	InboundPort          int32
	InboundTargetPort    int32
	OutboundProxyPort    int32
	ProxyUID             int64
	DefaultAudience      string
	// SharedDir is where the sidecars exchange files (the kagenti-shared emptyDir).
	SharedDir string
}

// DefaultIdentity returns the defaults of ARCHITECTURE.md §5.
func DefaultIdentity() Defaults {
	return Defaults{
		TrustDomain:          "cluster.local",
		SocketPath:           "/run/spire/agent-sockets/agent.sock",
		JWTAudience:          "kagenti-agents",
		OutputFormat:         "jwt",
		KeycloakURL:          "http://keycloak.kagenti-system.svc:8080",
		KeycloakRealm:        "default",
		ClientNameTemplate:   "{{.Namespace}}/{{.WorkloadName}}",
		TokenExchangeEnabled: true,
		InboundPort:          8080,
		InboundTargetPort:    8081,
		OutboundProxyPort:    15123,
		ProxyUID:             1337,
		DefaultAudience:      "downstream-service",
		SharedDir:            "/shared",
	}
}
