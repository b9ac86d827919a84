package authconfig

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/kagenti/platform/pkg/configmap/identity"
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
// variable Name sets the config.yaml field Path (a row of identity.Settings).
type EnvDefault struct {
	Name string
	Path string
}

// EnvDefaults lists every identity default the data plane reads from its environment: the rows
// of identity.Settings with a variable. The injector's configuration is their one source
// (docs/architecture.md §5); config.yaml overrides them.
var EnvDefaults = func() []EnvDefault {
	var out []EnvDefault
	for _, s := range identity.Settings {
		if s.Env != "" {
			out = append(out, EnvDefault{Name: s.Env, Path: s.Path})
		}
	}
	return out
}()

// DefaultsFromEnv reads the identity defaults from the environment (lookup is os.LookupEnv in
// the binary). Unset variables leave their field unset; a malformed value is an error naming
// the variable.
func DefaultsFromEnv(lookup func(string) (string, bool)) (Spec, error) {
	var s Spec
	var errs []error
	for _, setting := range identity.Settings {
		if setting.Env == "" {
			continue
		}
		v, ok := lookup(setting.Env)
		if !ok || v == "" {
			continue
		}
		if err := setField(&s, setting, strings.TrimSpace(v)); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s (%s): %w", setting.Env, setting.Path, err))
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
	if s, ok := identity.Lookup(path); ok && s.Env != "" {
		return s.Env
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
	for _, n := range identity.Variables() {
		seen[n] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
