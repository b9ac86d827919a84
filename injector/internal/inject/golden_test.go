package inject_test

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
	"github.com/kagenti/platform/pkg/duck"
)

// Rewrite the golden files with: UPDATE_GOLDEN=1 go test ./injector/internal/inject/
var updateGolden = os.Getenv("UPDATE_GOLDEN") == "1"

// variant is one way of injecting every input.
type variant struct {
	name        string
	classic     bool
	oidc        bool // identity.provider oidc with its URLs
	labels      map[string]string
	annotations map[string]string
}

var variants = []variant{
	{name: "native"},
	{name: "native-spiffe", labels: map[string]string{inject.LabelSpiffe: "enabled"}},
	{name: "classic-spiffe", classic: true, labels: map[string]string{inject.LabelSpiffe: "enabled"}},
	{name: "excluded", labels: map[string]string{inject.LabelSpiffe: "enabled"}, annotations: map[string]string{
		inject.AnnotationExcludeComponents:   "spiffe-helper, auth-proxy",
		inject.AnnotationOutboundExclude:     "5432,443",
		inject.AnnotationInboundExclude:      "9090",
		"kagenti.io/authbridge-memory-limit": "320Mi",
		"kagenti.io/proxy-init-cpu":          "20m",
	}},
	// An OpenID provider registered with through RFC 7591: KAGENTI_IDP_PROVIDER and KAGENTI_OIDC_*.
	{name: "native-oidc", oidc: true, labels: map[string]string{inject.LabelSpiffe: "enabled"}},
	// No proxy: proxy-init only writes spiffe-helper's configuration, without privileges.
	{name: "no-proxies", labels: map[string]string{inject.LabelSpiffe: "enabled"}, annotations: map[string]string{
		inject.AnnotationExcludeComponents: "auth-proxy,envoy-proxy",
	}},
	// Proxy mode: no proxy-init, no capability; HTTP_PROXY on the agent, a named inbound port.
	{name: "proxy-mode", labels: map[string]string{inject.LabelInterception: config.InterceptionProxy},
		annotations: map[string]string{inject.AnnotationNoProxy: "metadata.google.internal, .svc.cluster.local"}},
	// Proxy mode with spiffe-helper: proxy-init only writes helper.conf, unprivileged.
	{name: "proxy-mode-spiffe", labels: map[string]string{inject.LabelInterception: config.InterceptionProxy, inject.LabelSpiffe: "enabled"}},
}

func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/inputs/*.yaml")
	require.NoError(t, err)
	require.Len(t, inputs, 5, "one input per workload kind")
	used := map[string]bool{}
	for _, in := range inputs {
		kind := strings.TrimSuffix(filepath.Base(in), ".yaml")
		for _, v := range variants {
			golden := filepath.Join("testdata", "golden", kind+"."+v.name+".yaml")
			used[golden] = true
			t.Run(kind+"/"+v.name, func(t *testing.T) {
				w := readWorkload(t, in, v)
				cfg := config.Default()
				if v.classic {
					cfg.SidecarMode = config.SidecarClassic
				}
				if v.oidc {
					cfg.Identity.Provider = config.ProviderOIDC
					cfg.Identity.OIDC = config.OIDC{Issuer: "https://idp.example.com", TokenURL: "https://idp.example.com/oauth2/token",
						JWKSURL: "https://idp.example.com/oauth2/keys", RegistrationURL: "https://idp.example.com/oauth2/register"}
					require.NoError(t, cfg.Validate())
				}
				orig, err := w.PodTemplate()
				require.NoError(t, err)
				injected := injectWorkload(t, w, cfg)
				got := marshal(t, w.Object())
				if updateGolden {
					require.NoError(t, os.WriteFile(golden, got, 0o644))
				}
				want, err := os.ReadFile(golden)
				require.NoError(t, err, "missing golden file; run with UPDATE_GOLDEN=1")
				require.Equal(t, string(want), string(got), "output differs from %s; run with UPDATE_GOLDEN=1", golden)

				t.Run("idempotent", func(t *testing.T) {
					again, changed := injectTemplate(t, w, injected, cfg)
					require.False(t, changed, "injecting an injected template must change nothing")
					require.Same(t, injected, again)
				})
				t.Run("removal", func(t *testing.T) {
					removed, changed, err := inject.Remove(injected)
					require.NoError(t, err)
					require.True(t, changed)
					require.True(t, equality.Semantic.DeepEqual(orig, removed), "removal must restore the user's template exactly:\nwant %s\ngot  %s", yamlOf(t, orig), yamlOf(t, removed))
				})
				t.Run("reinject-after-config-change", func(t *testing.T) {
					changedCfg := config.Default()
					changedCfg.SidecarMode = cfg.SidecarMode
					changedCfg.Images.Authbridge = "ghcr.io/kagenti/kagenti-authbridge:v0.2.0"
					again, changed := injectTemplate(t, w, injected, changedCfg)
					require.True(t, changed)
					fresh, _ := injectTemplate(t, w, orig, changedCfg)
					require.True(t, equality.Semantic.DeepEqual(fresh, again), "re-injection must equal a fresh injection")
				})
			})
		}
	}
	// Unused goldens fail: every file in testdata/golden must belong to a case above.
	files, err := filepath.Glob("testdata/golden/*")
	require.NoError(t, err)
	var stale []string
	for _, f := range files {
		if !used[f] {
			stale = append(stale, f)
		}
	}
	sort.Strings(stale)
	require.Empty(t, stale, "unused golden files: delete them")
}

func readWorkload(t *testing.T, path string, v variant) *duck.Workload {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal(b, &u.Object))
	labels := u.GetLabels()
	for k, val := range v.labels {
		labels[k] = val
	}
	u.SetLabels(labels)
	if len(v.annotations) > 0 {
		u.SetAnnotations(v.annotations)
	}
	w, err := duck.NewWorkload(u)
	require.NoError(t, err)
	return w
}

func injectTemplate(t *testing.T, w *duck.Workload, tmpl *corev1.PodTemplateSpec, cfg *config.Config) (*corev1.PodTemplateSpec, bool) {
	t.Helper()
	opts, err := inject.ParseOptions(w.Name(), w.Object().GetLabels(), w.Object().GetAnnotations())
	require.NoError(t, err)
	opts.ReadTemplate(tmpl)
	r, err := inject.Render(cfg, opts)
	require.NoError(t, err)
	out, changed, err := inject.Inject(tmpl, r)
	require.NoError(t, err)
	return out, changed
}

func injectWorkload(t *testing.T, w *duck.Workload, cfg *config.Config) *corev1.PodTemplateSpec {
	t.Helper()
	tmpl, err := w.PodTemplate()
	require.NoError(t, err)
	out, changed := injectTemplate(t, w, tmpl, cfg)
	require.True(t, changed)
	require.NoError(t, w.SetPodTemplate(out))
	return out
}

func marshal(t *testing.T, u *unstructured.Unstructured) []byte {
	t.Helper()
	b, err := yaml.Marshal(u.Object)
	require.NoError(t, err)
	return append(bytes.TrimSpace(b), '\n')
}

func yamlOf(t *testing.T, v any) string {
	b, err := yaml.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
