package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kagenti/platform/injector/internal/config"
	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// TestHTTPHandlerAnswersAsControllerRuntime: the HTTP layer that reads and writes the
// AdmissionReview in pooled buffers gives the API server the same answer as controller-runtime's
// admission.Webhook, for an injection, a denial with warnings, a panic and every malformed request.
func TestHTTPHandlerAnswersAsControllerRuntime(t *testing.T) {
	injection := review(t, admissionv1.Create, deploymentGVK, deployment("agents", 2, 3))
	invalid := review(t, admissionv1.Create, deploymentGVK, deployment("agents", 1, 0))
	invalid = bytes.Replace(invalid, []byte(`"kagenti.io/inject":"enabled"`), []byte(`"kagenti.io/inject":"yes"`), 1)
	require.Contains(t, string(invalid), `"kagenti.io/inject":"yes"`)
	v1beta1 := bytes.Replace(injection, []byte(`admission.k8s.io/v1"`), []byte(`admission.k8s.io/v1beta1"`), 1)
	require.Contains(t, string(v1beta1), "v1beta1")

	panicking := admission.HandlerFunc(func(context.Context, admission.Request) admission.Response { panic("boom") })
	warning := admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		resp := admission.Allowed("fine").WithWarnings("careful <&>")
		resp.AuditAnnotations = map[string]string{"k": "v"}
		return resp
	})
	for _, c := range []struct {
		name        string
		handler     admission.Handler
		body        []byte
		contentType string
		wantPatch   bool
	}{
		{"injection", newHandler(), injection, "application/json", true},
		{"v1beta1", newHandler(), v1beta1, "application/json", true},
		{"denied", newHandler(), invalid, "application/json", false},
		{"warnings and audit annotations", warning, injection, "application/json", false},
		{"panic", panicking, injection, "application/json", false},
		{"empty body", newHandler(), nil, "application/json", false},
		{"not JSON", newHandler(), []byte("{"), "application/json", false},
		{"wrong content type", newHandler(), injection, "text/plain", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			answer := func(h http.Handler) (int, admissionv1.AdmissionReview, string) {
				var body *bytes.Reader
				if c.body != nil {
					body = bytes.NewReader(c.body)
				}
				req := httptest.NewRequest(http.MethodPost, injectorwebhook.Path, nil)
				if body != nil {
					req = httptest.NewRequest(http.MethodPost, injectorwebhook.Path, body)
				}
				req.Header.Set("Content-Type", c.contentType)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				var ar admissionv1.AdmissionReview
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &ar), rec.Body.String())
				return rec.Code, ar, rec.Body.String()
			}
			wantCode, want, _ := answer(&admission.Webhook{Handler: c.handler})
			gotCode, got, raw := answer(injectorwebhook.HTTPHandler(c.handler))
			require.Equal(t, wantCode, gotCode)
			require.NotNil(t, got.Response, raw)
			if want.Response.Result != nil && got.Response.Result != nil && want.Response.Result.Code != http.StatusOK {
				// Only the wording of a decoding error differs (controller-runtime's decoder is another).
				require.Equal(t, want.Response.Result.Code, got.Response.Result.Code, raw)
				require.NotEmpty(t, got.Response.Result.Message)
				want.Response.Result.Message, got.Response.Result.Message = "", ""
			}
			if want.APIVersion == "" {
				// controller-runtime answers a request it could not read without apiVersion and kind,
				// which the API server cannot read either ("expected webhook response of
				// admission.k8s.io/v1, Kind=AdmissionReview"); this handler answers in v1.
				require.Equal(t, "admission.k8s.io/v1", got.APIVersion)
				require.Equal(t, "AdmissionReview", got.Kind)
				want.TypeMeta = got.TypeMeta
			}
			require.Equal(t, want, got, raw)
			require.Equal(t, c.wantPatch, len(got.Response.Patch) > 0)
		})
	}
}

// TestConfigReloadReachesTheNextFreshPatch: the rendered sidecars and their encodings are cached
// per configuration; a hot-reloaded configuration is what the very next fresh injection's patch
// carries, and the cached one is no longer sent.
func TestConfigReloadReachesTheNextFreshPatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	w, err := kit.NewWatcher(path, config.Parse, logr.Discard())
	require.NoError(t, err)
	h := injectorwebhook.HTTPHandler(&injectorwebhook.Handler{Config: w.Current})
	body := review(t, admissionv1.Create, deploymentGVK, deployment("agents", 1, 0))

	old := config.Default().Images.Authbridge
	for range 2 { // the second from the cache
		_, resp := post(t, h, body)
		require.NotNil(t, resp)
		require.Contains(t, string(resp.Patch), `"image":"`+old+`"`)
	}

	const next = "ghcr.io/kagenti/kagenti-authbridge:v9.9.9"
	require.NoError(t, os.WriteFile(path, []byte("images: {authbridge: '"+next+"'}\n"), 0o644))
	require.NoError(t, w.Reload())
	_, resp := post(t, h, body)
	require.NotNil(t, resp)
	require.Contains(t, string(resp.Patch), `"image":"`+next+`"`)
	require.NotContains(t, string(resp.Patch), old)
}
