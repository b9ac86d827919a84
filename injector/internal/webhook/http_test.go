package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
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
