package authconfig

import (
	"fmt"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/configmap/identity"
)

// Where the files live in a pod (docs/architecture.md §5, §6).
const (
	// ConfigDir is where the ConfigMap {workload}-token-exchange is: projected into the identity
	// volume (IdentityDir) since injection v4, config.yaml beside defaults.env (optional source).
	ConfigDir = IdentityDir
	// LegacyConfigDir is where injections v1 to v3 mounted the ConfigMap, a volume of its own.
	LegacyConfigDir = "/etc/kagenti/token-exchange"
	// ConfigFile is the key of that ConfigMap holding a Spec (its only key).
	ConfigFile = contract.TokenExchangeConfigFile
	// SharedDir is the emptyDir the identity sidecars exchange files through.
	SharedDir = "/shared"
	// IdPCredentialsDir is where the injector mounts the Secret with the identity provider's
	// registration credentials (optional volume).
	IdPCredentialsDir = "/etc/kagenti/idp-credentials"
	// IdentityDir is the injector's identity volume: the workload's identity defaults
	// (IdentityDefaultsFile, NAME=VALUE lines of EnvNames), one file per pod field (POD_NAMESPACE,
	// and POD_NAME when the hostname is not the pod's name), and (v4) the ConfigMap's config.yaml.
	// The environment, when set, wins over it.
	IdentityDir = "/etc/kagenti/identity"
	// IdentityDefaultsFile is the file of IdentityDir with the defaults.
	IdentityDefaultsFile = "defaults.env"
	// SpireSocketDir is where the injector mounts the SPIRE agent's socket volume into
	// spiffe-helper: the Workload API socket must be in it.
	SpireSocketDir = "/run/spire/agent-sockets"
)

// Files under SharedDir. The names are relative: spiffe-helper joins them to its cert_dir.
const (
	HelperConfFile   = "helper.conf"       // written by proxy-init, read by spiffe-helper
	JWTSVIDFile      = "jwt_svid.token"    // written by spiffe-helper
	ClientIDFile     = "client-id.txt"     // written by client-registration
	ClientSecretFile = "client-secret.txt" // written by client-registration
	RegistrationFile = "registration.json" // client-registration's own state (RFC 7591/7592)
)

// MaxConfigSize bounds config.yaml; a ConfigMap holds at most 1 MiB.
const MaxConfigSize = 1 << 20

// Parse reads config.yaml strictly: unknown fields and malformed values are errors. An empty
// document is an empty Spec.
func Parse(data []byte) (Spec, error) {
	var s Spec
	if len(data) > MaxConfigSize {
		return s, fmt.Errorf("%d bytes exceed the limit of %d", len(data), MaxConfigSize)
	}
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// Marshal renders s as config.yaml.
func Marshal(s Spec) []byte {
	b, err := yaml.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("marshalling Spec: %v", err)) // plain structs: cannot fail
	}
	return b
}

// ContentHash is the hash of a ConfigMap's content as the kubelet projects it into a volume:
// one file per key, which the controller writes as data (identity.ContentHash, the value it
// records in the kagenti.io/content-hash annotation), so a role reports the same value for the
// content it runs as the controller for the content it wrote. An empty map (no ConfigMap) hashes
// to "".
func ContentHash(files map[string][]byte) string {
	if len(files) == 0 {
		return ""
	}
	data := make(map[string]string, len(files))
	for k, v := range files {
		data[k] = string(v)
	}
	return identity.ContentHash(data, nil)
}

// IsIdentityFile reports whether name is a file the identity directory holds besides the
// ConfigMap's keys: the defaults (IdentityDefaultsFile), or a file named after an identity
// variable (POD_NAME, POD_NAMESPACE). The ConfigMap {workload}-token-exchange has only ConfigFile.
func IsIdentityFile(name string) bool {
	return name == IdentityDefaultsFile || slices.Contains(EnvNames(), name)
}
