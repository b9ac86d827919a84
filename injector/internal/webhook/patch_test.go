package webhook_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
	"github.com/kagenti/platform/pkg/duck"
)

// TestAppendPatchEqualsFullDocument holds the JSON Patch the handler builds from what injection
// appended to the whole-document result: for every golden of the inject package, the workload
// without its injection is admitted, the patch applied, and the result must be the golden.
// Then the golden itself is admitted under a changed configuration (re-injection, the diffed
// path): the result must be a fresh injection under that configuration.
func TestAppendPatchEqualsFullDocument(t *testing.T) {
	goldens, err := filepath.Glob("../inject/testdata/golden/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, goldens)
	for _, file := range goldens {
		t.Run(filepath.Base(file), func(t *testing.T) {
			want := readObject(t, file)
			w, err := duck.NewWorkload(want.DeepCopy())
			require.NoError(t, err)
			tmpl, err := w.PodTemplate()
			require.NoError(t, err)
			stripped, changed, err := inject.Remove(tmpl)
			require.NoError(t, err)
			require.True(t, changed)
			require.NoError(t, w.SetPodTemplate(stripped))
			input := w.Object()

			cfg := config.Default()
			if strings.Contains(file, "classic") {
				cfg.SidecarMode = config.SidecarClassic
			}
			if strings.Contains(file, "oidc") { // the inject package's native-oidc variant
				cfg.Identity.Provider = config.ProviderOIDC
				cfg.Identity.OIDC = config.OIDC{Issuer: "https://idp.example.com", TokenURL: "https://idp.example.com/oauth2/token",
					JWKSURL: "https://idp.example.com/oauth2/keys", RegistrationURL: "https://idp.example.com/oauth2/register"}
			}
			got, ops := admit(t, cfg, input)
			require.NotEmpty(t, ops)
			for _, op := range ops {
				require.Equal(t, "add", op, "a fresh injection only adds")
			}
			require.Equal(t, jsonOf(t, want.Object), jsonOf(t, got), "patched object differs from %s", file)

			// Re-injection under another configuration: strip and inject, diffed.
			changedCfg := config.Default()
			changedCfg.SidecarMode = cfg.SidecarMode
			changedCfg.Identity = cfg.Identity
			changedCfg.Images.Authbridge = "ghcr.io/kagenti/kagenti-authbridge:v0.2.0"
			reinjected, _ := admit(t, changedCfg, want)
			fresh, _ := admit(t, changedCfg, input)
			require.Equal(t, jsonOf(t, fresh), jsonOf(t, reinjected))
		})
	}
}

func readObject(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal(b, &u.Object))
	return u
}

// admit sends obj through the handler as a CREATE and returns it with the patch applied, and the
// patch's operation names.
func admit(t *testing.T, cfg *config.Config, obj *unstructured.Unstructured) (map[string]any, []string) {
	t.Helper()
	h := &injectorwebhook.Handler{Config: func() *config.Config { return cfg }}
	raw, err := json.Marshal(obj.Object)
	require.NoError(t, err)
	gvk := obj.GroupVersionKind()
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: types.UID("1"), Kind: metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Operation: admissionv1.Create, Namespace: obj.GetNamespace(), Object: runtime.RawExtension{Raw: raw},
	}}
	resp := h.Handle(context.Background(), req)
	require.True(t, resp.Allowed, "%+v", resp.Result)
	var ops []struct {
		Op string `json:"op"`
	}
	require.NoError(t, json.Unmarshal(resp.Patch, &ops))
	var names []string
	for _, op := range ops {
		names = append(names, op.Op)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	require.NoError(t, err)
	patched, err := p.Apply(raw)
	require.NoError(t, err, "the patch applies to the object as sent")
	var out map[string]any
	require.NoError(t, json.Unmarshal(patched, &out))
	return out, names
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var m any
	require.NoError(t, json.Unmarshal(b, &m))
	b, err = json.MarshalIndent(m, "", " ")
	require.NoError(t, err)
	return string(b)
}
