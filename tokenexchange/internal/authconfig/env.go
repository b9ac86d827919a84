package authconfig

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The workload's identity, from the downward API and the injector.
const (
	EnvPodName        = "POD_NAME"                // fieldRef metadata.name
	EnvPodNamespace   = "POD_NAMESPACE"           // fieldRef metadata.namespace
	EnvServiceAccount = "KAGENTI_SERVICE_ACCOUNT" // the template's serviceAccountName, in defaults.env
	EnvWorkload       = "KAGENTI_WORKLOAD"        // the workload's name, set by the injector
	// EnvAppProbes is the agent's original probes the injector rewrote (JSON, in defaults.env):
	// pkg/configmap's AppProbesVariable, which the sidecar parses (appprobe.Parse).
	EnvAppProbes = "KAGENTI_APP_PROBES"
)

// EnvDefault is one identity default the injector passes to the sidecars: the environment
// variable Name sets the config.yaml field Path.
type EnvDefault struct {
	Name string
	Path string
	set  func(s *Spec, v string) error
}

// EnvDefaults lists every identity default the data plane reads from its environment. The
// injector's configuration is their one source (docs/architecture.md §5); config.yaml overrides them.
var EnvDefaults = []EnvDefault{
	{"KAGENTI_SPIFFE_ENABLED", "spiffe.enabled", setBool(func(s *Spec) **bool { return &spiffe(s).Enabled })},
	{"KAGENTI_TRUST_DOMAIN", "spiffe.trustDomain", setString(func(s *Spec) *string { return &spiffe(s).TrustDomain })},
	{"KAGENTI_SPIFFE_SOCKET", "spiffe.socketPath", setString(func(s *Spec) *string { return &spiffe(s).SocketPath })},
	{"KAGENTI_JWT_AUDIENCE", "spiffe.audience", setString(func(s *Spec) *string { return &spiffe(s).Audience })},
	{"KAGENTI_CLIENT_REGISTRATION_ENABLED", "clientRegistration.enabled", setBool(func(s *Spec) **bool { return &registration(s).Enabled })},
	{"KAGENTI_IDP_PROVIDER", "clientRegistration.provider", setString(func(s *Spec) *string { return &registration(s).Provider })},
	{"KAGENTI_IDP_URL", "clientRegistration.keycloak.url", setString(func(s *Spec) *string { return &keycloak(s).URL })},
	{"KAGENTI_REALM", "clientRegistration.keycloak.realm", setString(func(s *Spec) *string { return &keycloak(s).Realm })},
	{"KAGENTI_CLIENT_NAME_TEMPLATE", "clientRegistration.keycloak.clientNameTemplate", setString(func(s *Spec) *string { return &keycloak(s).ClientNameTemplate })},
	{"KAGENTI_TOKEN_EXCHANGE", "clientRegistration.keycloak.tokenExchangeEnabled", setBool(func(s *Spec) **bool { return &keycloak(s).TokenExchangeEnabled })},
	{"KAGENTI_TOKEN_EXCHANGE", "outbound.tokenExchange.enabled", setBool(func(s *Spec) **bool { return &exchange(s).Enabled })},
	{"KAGENTI_OIDC_ISSUER", "clientRegistration.oidc.issuer", setString(func(s *Spec) *string { return &oidc(s).Issuer })},
	{"KAGENTI_OIDC_TOKEN_URL", "clientRegistration.oidc.tokenUrl", setString(func(s *Spec) *string { return &oidc(s).TokenURL })},
	{"KAGENTI_OIDC_JWKS_URL", "clientRegistration.oidc.jwksUrl", setString(func(s *Spec) *string { return &oidc(s).JWKSURL })},
	{"KAGENTI_OIDC_REGISTRATION_URL", "clientRegistration.oidc.registrationUrl", setString(func(s *Spec) *string { return &oidc(s).RegistrationURL })},
	{"KAGENTI_INBOUND_ENABLED", "inbound.enabled", setBool(func(s *Spec) **bool { return &inbound(s).Enabled })},
	{"KAGENTI_INBOUND_PORT", "inbound.port", setPort(func(s *Spec) **int32 { return &inbound(s).Port })},
	{"KAGENTI_TARGET_PORT", "inbound.targetPort", setPort(func(s *Spec) **int32 { return &inbound(s).TargetPort })},
	{"KAGENTI_INBOUND_PORTS_EXCLUDE", "inbound.excludePorts", setPorts(func(s *Spec) *[]int32 { return &inbound(s).ExcludePorts })},
	{"KAGENTI_OUTBOUND_ENABLED", "outbound.enabled", setBool(func(s *Spec) **bool { return &outbound(s).Enabled })},
	{"KAGENTI_OUTBOUND_PORT", "outbound.trafficInterception.proxyPort", setPort(func(s *Spec) **int32 { return &interception(s).ProxyPort })},
	{"KAGENTI_PROXY_UID", "outbound.trafficInterception.proxyUid", setUID(func(s *Spec) **int64 { return &interception(s).ProxyUID })},
	{"KAGENTI_OUTBOUND_PORTS_EXCLUDE", "outbound.trafficInterception.excludePorts", setPorts(func(s *Spec) *[]int32 { return &interception(s).ExcludePorts })},
	{"KAGENTI_DEFAULT_AUDIENCE", "outbound.tokenExchange.defaultTarget.audience", setString(func(s *Spec) *string { return &defaultTarget(s).Audience })},
}

// DefaultsFromEnv reads the identity defaults from the environment (lookup is os.LookupEnv in
// the binary). Unset variables leave their field unset; a malformed value is an error naming
// the variable.
func DefaultsFromEnv(lookup func(string) (string, bool)) (Spec, error) {
	var s Spec
	var errs []error
	for _, e := range EnvDefaults {
		v, ok := lookup(e.Name)
		if !ok || v == "" {
			continue
		}
		if err := e.set(&s, strings.TrimSpace(v)); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s (%s): %w", e.Name, e.Path, err))
		}
	}
	return s, errors.Join(errs...)
}

// DefaultServiceAccount is the service account of a pod whose template names none (the API
// server's ServiceAccount admission sets it); the injector writes KAGENTI_SERVICE_ACCOUNT only
// for another one.
const DefaultServiceAccount = "default"

// WorkloadFromEnv reads the workload's identity from the environment.
func WorkloadFromEnv(lookup func(string) (string, bool)) Workload {
	get := func(k string) string { v, _ := lookup(k); return v }
	w := Workload{
		Namespace:      get(EnvPodNamespace),
		Name:           get(EnvWorkload),
		PodName:        get(EnvPodName),
		ServiceAccount: get(EnvServiceAccount),
	}
	if w.ServiceAccount == "" {
		w.ServiceAccount = DefaultServiceAccount
	}
	return w
}

// Where Workload.PodName came from (PodNameOrHostname).
const (
	PodNameFromEnv      = "POD_NAME"
	PodNameFromHostname = "hostname"
)

// PodNameOrHostname completes w with the hostname as its pod name when POD_NAME set none (neither
// the environment nor the identity volume): the injector projects the name only when the pod's
// hostname is not its name (the template sets hostname or setHostnameAsFQDN), since otherwise the
// kubelet makes the hostname the pod's name. from says which source the name came from ("" when
// neither gave one: only a client name template with {{.PodName}} needs it, and Resolve says so).
func PodNameOrHostname(w Workload, hostname func() (string, error)) (_ Workload, from string) {
	if w.PodName != "" {
		return w, PodNameFromEnv
	}
	if h, err := hostname(); err == nil && h != "" {
		w.PodName = h
		return w, PodNameFromHostname
	}
	return w, ""
}

// envOf names the environment variable that sets the default of path, for error messages.
func envOf(path string) string {
	for _, e := range EnvDefaults {
		if e.Path == path {
			return e.Name
		}
	}
	if i := strings.LastIndex(path, "."); i > 0 {
		derived := map[string]string{
			"issuer":   "KAGENTI_IDP_URL and KAGENTI_REALM (Keycloak) or KAGENTI_OIDC_ISSUER",
			"jwksUrl":  "KAGENTI_IDP_URL and KAGENTI_REALM (Keycloak) or KAGENTI_OIDC_JWKS_URL",
			"tokenUrl": "KAGENTI_IDP_URL and KAGENTI_REALM (Keycloak) or KAGENTI_OIDC_TOKEN_URL",
		}
		if d, ok := derived[path[i+1:]]; ok {
			return "derived from " + d
		}
	}
	return "(none)"
}

// EnvNames returns the distinct names of EnvDefaults plus the workload variables, sorted.
func EnvNames() []string {
	seen := map[string]bool{EnvPodName: true, EnvPodNamespace: true, EnvServiceAccount: true, EnvWorkload: true, EnvAppProbes: true}
	for _, e := range EnvDefaults {
		seen[e.Name] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func setString(field func(*Spec) *string) func(*Spec, string) error {
	return func(s *Spec, v string) error { *field(s) = v; return nil }
}

func setBool(field func(*Spec) **bool) func(*Spec, string) error {
	return func(s *Spec, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*field(s) = &b
		return nil
	}
}

func setPort(field func(*Spec) **int32) func(*Spec, string) error {
	return func(s *Spec, v string) error {
		p, err := parsePort(v)
		if err != nil {
			return err
		}
		*field(s) = &p
		return nil
	}
}

func setUID(field func(*Spec) **int64) func(*Spec, string) error {
	return func(s *Spec, v string) error {
		u, err := strconv.ParseInt(v, 10, 64)
		if err != nil || u < 0 || u > 1<<31-1 {
			return fmt.Errorf("%q is not a UID", v)
		}
		*field(s) = &u
		return nil
	}
}

// setPorts reads a comma-separated list of ports (the format of the kagenti.io/*-ports-exclude
// annotations).
func setPorts(field func(*Spec) *[]int32) func(*Spec, string) error {
	return func(s *Spec, v string) error {
		var out []int32
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			p, err := parsePort(f)
			if err != nil {
				return err
			}
			out = append(out, p)
		}
		*field(s) = union(nil, out)
		return nil
	}
}

func parsePort(v string) (int32, error) {
	p, err := strconv.ParseInt(v, 10, 32)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", v)
	}
	return int32(p), nil
}

// Accessors that allocate a section on first use, for the setters above.

func spiffe(s *Spec) *SpiffeSpec {
	if s.Spiffe == nil {
		s.Spiffe = &SpiffeSpec{}
	}
	return s.Spiffe
}

func registration(s *Spec) *ClientRegistrationSpec {
	if s.ClientRegistration == nil {
		s.ClientRegistration = &ClientRegistrationSpec{}
	}
	return s.ClientRegistration
}

func keycloak(s *Spec) *KeycloakSpec {
	r := registration(s)
	if r.Keycloak == nil {
		r.Keycloak = &KeycloakSpec{}
	}
	return r.Keycloak
}

func oidc(s *Spec) *OIDCSpec {
	r := registration(s)
	if r.OIDC == nil {
		r.OIDC = &OIDCSpec{}
	}
	return r.OIDC
}

func inbound(s *Spec) *InboundSpec {
	if s.Inbound == nil {
		s.Inbound = &InboundSpec{}
	}
	return s.Inbound
}

func outbound(s *Spec) *OutboundSpec {
	if s.Outbound == nil {
		s.Outbound = &OutboundSpec{}
	}
	return s.Outbound
}

func interception(s *Spec) *TrafficInterceptionSpec {
	o := outbound(s)
	if o.TrafficInterception == nil {
		o.TrafficInterception = &TrafficInterceptionSpec{}
	}
	return o.TrafficInterception
}

func exchange(s *Spec) *TokenExchangeSpec {
	o := outbound(s)
	if o.TokenExchange == nil {
		o.TokenExchange = &TokenExchangeSpec{}
	}
	return o.TokenExchange
}

func defaultTarget(s *Spec) *ExchangeTarget {
	t := exchange(s)
	if t.DefaultTarget == nil {
		t.DefaultTarget = &ExchangeTarget{}
	}
	return t.DefaultTarget
}
