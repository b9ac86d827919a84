package webhook_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
	"github.com/kagenti/platform/pkg/duck"
)

// updatePatches rewrites testdata/patches from the handler's answers (the repository's golden switch).
var updatePatches = os.Getenv("UPDATE_GOLDEN") == "1"

// TestPatchBytes holds the JSON Patch the webhook answers, byte for byte as the API server receives
// it, for every golden of the inject package admitted without its injection (as in
// TestAppendPatchEqualsFullDocument). It keeps a change of how the patch is built or encoded from
// changing what is sent. When the injection itself changes (the goldens), rewrite the files:
//
//	UPDATE_GOLDEN=1 go test ./injector/internal/webhook/ -run TestPatchBytes
func TestPatchBytes(t *testing.T) {
	goldens, err := filepath.Glob("../inject/testdata/golden/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, goldens)
	for _, file := range goldens {
		t.Run(filepath.Base(file), func(t *testing.T) {
			w, err := duck.NewWorkload(readObject(t, file))
			require.NoError(t, err)
			tmpl, err := w.PodTemplate()
			require.NoError(t, err)
			stripped, _, err := inject.Remove(tmpl)
			require.NoError(t, err)
			require.NoError(t, w.SetPodTemplate(stripped))
			obj := w.Object()

			cfg := config.Default()
			if strings.Contains(file, "classic") {
				cfg.SidecarMode = config.SidecarClassic
			}
			if strings.Contains(file, "oidc") {
				cfg.Identity.Provider = config.ProviderOIDC
				cfg.Identity.OIDC = config.OIDC{Issuer: "https://idp.example.com", TokenURL: "https://idp.example.com/oauth2/token",
					JWKSURL: "https://idp.example.com/oauth2/keys", RegistrationURL: "https://idp.example.com/oauth2/register"}
			}
			raw, err := json.Marshal(obj.Object)
			require.NoError(t, err)
			gvk := obj.GroupVersionKind()
			body, err := json.Marshal(admissionv1.AdmissionReview{
				TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Request: &admissionv1.AdmissionRequest{
					UID: types.UID("1"), Kind: metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
					Operation: admissionv1.Create, Namespace: obj.GetNamespace(), Object: runtime.RawExtension{Raw: raw},
				},
			})
			require.NoError(t, err)
			h := injectorwebhook.HTTPHandler(&injectorwebhook.Handler{Config: func() *config.Config { return cfg }})
			req := httptest.NewRequest(http.MethodPost, injectorwebhook.Path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, http.StatusOK, rec.Code)
			var ar admissionv1.AdmissionReview
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &ar))
			require.NotNil(t, ar.Response)
			require.NotEmpty(t, ar.Response.Patch)

			want := filepath.Join("testdata", "patches", strings.TrimSuffix(filepath.Base(file), ".yaml")+".json")
			if updatePatches {
				require.NoError(t, os.MkdirAll(filepath.Dir(want), 0o755))
				require.NoError(t, os.WriteFile(want, ar.Response.Patch, 0o644))
			}
			b, err := os.ReadFile(want)
			require.NoError(t, err, "no recorded patch: run with UPDATE_GOLDEN=1")
			require.Equal(t, string(b), string(ar.Response.Patch), "the patch sent for %s changed", file)
		})
	}
}
