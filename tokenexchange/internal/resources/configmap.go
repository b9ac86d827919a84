// Package resources renders the objects the tokenexchange controller writes. Its functions are
// pure: no client, no clock, same input → byte-identical output.
package resources

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// Keys of the ConfigMap, files under /etc/kagenti/token-exchange/ (ARCHITECTURE.md §6).
const (
	ConfigKey  = "config.yaml"
	RoutesKey  = "routes.yaml"
	HelperKey  = "helper.conf"
	TargetAnno = "kagenti.io/target"
)

// ConfigMapName is the name of the ConfigMap for workload, shared with the injector.
func ConfigMapName(workload string) string { return configmap.TokenExchangeName(workload) }

// MakeConfigMap renders the ConfigMap {workload}-token-exchange for te and its workload t. The
// owner reference, managed-by label and content hash are added by configmap.Applier.
func MakeConfigMap(te *v1alpha1.TokenExchange, t Target, d Defaults) *corev1.ConfigMap {
	c := ResolveConfig(te, t, d)
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        ConfigMapName(t.Name),
			Namespace:   t.Namespace,
			Labels:      map[string]string{"app.kubernetes.io/part-of": "kagenti", "app.kubernetes.io/component": "token-exchange"},
			Annotations: map[string]string{TargetAnno: t.Kind + "/" + t.Name},
		},
		Data: map[string]string{
			ConfigKey: header("config.yaml", te) + mustYAML(c),
			RoutesKey: header("routes.yaml", te) + mustYAML(Routes(c)),
			HelperKey: HelperConf(c, d),
		},
	}
}

func header(file string, te *v1alpha1.TokenExchange) string {
	return fmt.Sprintf("# %s rendered by kagenti-tokenexchange from TokenExchange %s/%s. Do not edit: changes are overwritten.\n",
		file, te.Namespace, te.Name)
}

// Route is one entry of routes.yaml, the format the auth sidecars read; the first matching host
// wins. token_scopes is space-separated, as in an OAuth scope parameter.
type Route struct {
	Host           string `json:"host"`
	TargetAudience string `json:"target_audience,omitempty"`
	TokenScopes    string `json:"token_scopes,omitempty"`
	TokenURL       string `json:"token_url,omitempty"`
	Passthrough    bool   `json:"passthrough"`
}

// Routes turns the resolved destination rules into routes. A rule without a target, and every
// rule when token exchange is disabled, passes the original token through.
func Routes(c Config) []Route {
	tx := c.Outbound.TokenExchange
	routes := make([]Route, 0, len(tx.DestinationRules))
	for _, r := range tx.DestinationRules {
		if r.Target == nil || !tx.Enabled {
			routes = append(routes, Route{Host: r.Host, Passthrough: true})
			continue
		}
		routes = append(routes, Route{
			Host:           r.Host,
			TargetAudience: r.Target.Audience,
			TokenScopes:    strings.Join(r.Target.Scopes, " "),
			TokenURL:       tx.TokenURL,
		})
	}
	return routes
}

// HelperConf renders the spiffe-helper configuration (HCL) for the resolved SPIFFE settings.
func HelperConf(c Config, d Defaults) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# helper.conf rendered by kagenti-tokenexchange for %s %s/%s. Do not edit.\n",
		c.Workload.Kind, c.Workload.Namespace, c.Workload.Name)
	fmt.Fprintf(&b, "agent_address = %q\n", c.Spiffe.SocketPath)
	b.WriteString("cmd = \"\"\ncmd_args = \"\"\n")
	fmt.Fprintf(&b, "cert_dir = %q\n", d.SharedDir)
	b.WriteString("daemon_mode = true\n")
	switch c.Spiffe.OutputFormat {
	case "x509":
		b.WriteString("svid_file_name = \"svid.pem\"\nsvid_key_file_name = \"svid_key.pem\"\nsvid_bundle_file_name = \"svid_bundle.pem\"\n")
	default:
		fmt.Fprintf(&b, "jwt_svids = [{jwt_audience = %q, jwt_svid_file_name = %q}]\n",
			c.Spiffe.Audience, path.Join(d.SharedDir, "jwt_svid.token"))
	}
	return b.String()
}

// mustYAML marshals the plain structs of this package, which cannot fail.
func mustYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("rendering %T: %v", v, err))
	}
	return string(b)
}
