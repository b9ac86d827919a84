// Package identity holds the identity defaults built into the data plane: the values
// kagenti-authbridge takes for an identity variable that the workload's defaults.env (the pod
// annotation kagenti.io/identity-defaults) leaves out, and the injector's own defaults. The injector
// writes a variable only where its configuration differs (issue 15: most pods carry none of them).
//
// It imports only the standard library, so that kagenti-authbridge links it without the
// controller libraries of package configmap.
package identity

// The shipped defaults (docs/architecture.md §5).
const (
	TrustDomain        = "cluster.local"
	IdPURL             = "http://keycloak.kagenti-system.svc:8080"
	Realm              = "default"
	ClientNameTemplate = "{{.Namespace}}/{{.WorkloadName}}"
	InboundPort        = 8080
	TargetPort         = 8081
	OutboundPort       = 15123
	ProxyUID           = 1337
	DefaultAudience    = "downstream-service"
	// JWKSRefreshSeconds is how often the inbound proxy fetches the signing keys again.
	JWKSRefreshSeconds = 600
	// SpiffeEnabled is off: a workload asks for SPIFFE with the label kagenti.io/spiffe.
	SpiffeEnabled = false
)

// builtIn holds each identity variable with a built-in value (the rows of Settings that have
// one). The SPIFFE socket and JWT audience have none: the injector writes them exactly when SPIFFE
// is on, and a pod without SPIFFE resolves them unset, as it always did.
var builtIn = func() map[string]string {
	m := map[string]string{}
	for _, s := range Settings {
		if s.HasBuiltIn {
			m[s.Env] = s.BuiltIn
		}
	}
	return m
}()

// BuiltIn returns the built-in value of the identity variable name, and whether it has one. A
// variable that defaults.env sets, even to "", does not take it: an empty line unsets the default
// (an OpenID provider configured without Keycloak writes KAGENTI_IDP_URL= and KAGENTI_REALM=).
func BuiltIn(name string) (string, bool) {
	v, ok := builtIn[name]
	return v, ok
}
