package webhook_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	webhook "github.com/kagenti/platform/injector/internal/webhook"
)

// TestSetupRegistersBeforeStart: controller-runtime's webhook server may only be registered on
// before it starts (its mux is read without a lock while Start sets it up), so Setup must register
// the handler right away, in both certificate modes, and the server must not serve before the
// certificate is ready (its readiness check fails meanwhile, and Start does not fail for the
// missing files).
func TestSetupRegistersBeforeStart(t *testing.T) {
	for name, o := range map[string]webhook.Options{
		"rotator":  {Namespace: "kagenti-system", CertSecret: "s", WebhookConfig: "c", ServiceName: "svc", RotatorCertDir: t.TempDir(), Registry: prometheus.NewRegistry(), RotatorName: uniqueName()},
		"cert-dir": {CertDir: t.TempDir(), Registry: prometheus.NewRegistry()},
	} {
		t.Run(name, func(t *testing.T) {
			srv := webhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: 1, CertDir: t.TempDir()})
			mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
				Metrics: metricsserver.Options{BindAddress: "0"}, WebhookServer: srv,
			})
			require.NoError(t, err)
			require.NoError(t, webhook.Setup(mgr, o, logr.Discard()))

			mux := srv.WebhookMux()
			require.NotNil(t, mux, "nothing registered before the manager starts")
			_, pattern := mux.Handler(httptest.NewRequest("POST", webhook.Path, nil))
			assert.Equal(t, webhook.Path, pattern)

			if name == "rotator" {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				assert.NoError(t, srv.Start(ctx), "without a certificate the server waits instead of failing")
				assert.Error(t, srv.StartedChecker()(nil))
			}
		})
	}
}

func TestSetupRefusesAPlainServer(t *testing.T) {
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{}),
	})
	require.NoError(t, err)
	err = webhook.Setup(mgr, webhook.Options{CertDir: t.TempDir()}, logr.Discard())
	assert.ErrorContains(t, err, "webhook.NewServer")
}

// uniqueName names a test's rotator: controller names are unique per process, and tests (and
// -count repetitions) each add one.
func uniqueName() string { return "test-rotator-" + strings.ToLower(rand.Text()) }

// TestNewServerServesHTTP1Only: the server offers HTTP/1.1 alone in the TLS handshake, where
// controller-runtime offers h2 (see HTTP1Only for why).
func TestNewServerServesHTTP1Only(t *testing.T) {
	srv := webhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: 1})
	def, ok := srv.Server.(*ctrlwebhook.DefaultServer)
	require.True(t, ok, "%T", srv.Server)
	cfg := &tls.Config{NextProtos: []string{"h2"}} // what controller-runtime starts from
	for _, opt := range def.Options.TLSOpts {
		opt(cfg)
	}
	assert.Equal(t, []string{"http/1.1"}, cfg.NextProtos)
}
