package webhook_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
)

// BenchmarkServeTLS posts 1-container reviews to the webhook served by net/http over TLS and
// HTTP/1.1 on one kept-alive connection, as the API server does, each Deployment with a name of its
// own (as in a cluster: 4,096 names, more than the render cache holds); the allocations include
// the client's (profile with -memprofile and focus on the server's frames to separate them).
func BenchmarkServeTLS(b *testing.B) {
	srv := httptest.NewUnstartedServer(injectorwebhook.HTTPHandler(newHandler()))
	srv.EnableHTTP2 = false
	srv.StartTLS()
	defer srv.Close()
	c := srv.Client()
	bodies := make([][]byte, 4096)
	for i := range bodies {
		d := deployment("agents", 1, 0)
		d.Name = fmt.Sprintf("agent-%d", i)
		bodies[i] = review(b, admissionv1.Create, deploymentGVK, d)
	}
	var out bytes.Buffer
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		body := bodies[i%len(bodies)]
		i++
		resp, err := c.Post(srv.URL+injectorwebhook.Path, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out.Reset()
		_, _ = io.Copy(&out, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(out.Bytes(), []byte(`"patch":`)) {
			b.Fatalf("unexpected response %d %s", resp.StatusCode, out.Bytes())
		}
	}
}
