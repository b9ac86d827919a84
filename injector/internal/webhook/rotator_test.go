package webhook_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/injector/internal/inject"
	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
)

// TestRotatorServesShippedWebhook installs the shipped Secret, MutatingWebhookConfiguration and RBAC
// on a real API server and runs the injector, as its ServiceAccount with only the shipped rights
// (update of its own configuration and Secret), with its default certificate source, the rotator:
// the rotator must issue the certificate for the Service, inject its CA into the configuration, and
// the API server must then call the webhook over TLS and apply its patch. The kubelet's Secret mount
// is played by copying the Secret into the cert directory.
func TestRotatorServesShippedWebhook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const (
		systemNS = "kagenti-system"
		secret   = "kagenti-injector-cert"
		service  = "kagenti-injector"
	)
	env := &envtest.Environment{BinaryAssetsDirectory: assetsDir(t)}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	require.NoError(t, err)

	port := freePort(t)
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNS}}))
	installShippedRBAC(t, c, filepath.Join(assetsDir(t), "kubectl"))
	s := &corev1.Secret{}
	readShipped(t, "secret.yaml", s)
	s.Namespace = systemNS
	require.NoError(t, c.Create(ctx, s))
	wh := &admissionregistrationv1.MutatingWebhookConfiguration{}
	readShipped(t, "mutatingwebhookconfiguration.yaml", wh)
	require.Len(t, wh.Webhooks, 1)
	require.Equal(t, service, wh.Webhooks[0].ClientConfig.Service.Name)
	// No Service network here: the API server reaches the webhook by URL, on a name the rotator adds.
	url := fmt.Sprintf("https://localhost:%d%s", port, *wh.Webhooks[0].ClientConfig.Service.Path)
	wh.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
	require.NoError(t, c.Create(ctx, wh))

	certDir := t.TempDir()
	srv := injectorwebhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir})
	// The injector runs as its ServiceAccount, with the shipped RBAC only.
	mgr, err := ctrl.NewManager(asServiceAccount(cfg, systemNS, service), ctrl.Options{Scheme: clientgoscheme.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, WebhookServer: srv})
	require.NoError(t, err)
	mgrCtx, stop := context.WithCancel(ctx)
	require.NoError(t, injectorwebhook.Setup(mgr, injectorwebhook.Options{
		Namespace: systemNS, RotatorCertDir: certDir, CertSecret: secret, WebhookConfig: wh.Name,
		RotatorName: uniqueName(), Registry: prometheus.NewRegistry(),
		ServiceName: service, ExtraDNSNames: []string{"localhost"},
	}, logr.Discard()))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() { stop(); <-done })

	require.NoError(t, wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(s), s)
		return err == nil && len(s.Data["tls.crt"]) > 0, err
	}))
	block, _ := pem.Decode(s.Data["tls.crt"])
	require.NotNil(t, block)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.Contains(t, cert.DNSNames, service+"."+systemNS+".svc")
	require.NoError(t, wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(wh), wh)
		return err == nil && len(wh.Webhooks[0].ClientConfig.CABundle) > 0, err
	}))
	assert.Equal(t, string(s.Data["ca.crt"]), string(wh.Webhooks[0].ClientConfig.CABundle))

	// failurePolicy Fail: until the webhook serves, a labelled create is refused; then it is injected.
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents", Labels: map[string]string{"kagenti.io/injection": "enabled"}}}))
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "agent", Labels: map[string]string{inject.LabelInject: inject.InjectEnabled}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: *userTemplate.DeepCopy(),
		},
	}
	require.NoError(t, wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return c.Create(ctx, d.DeepCopy(), client.DryRunAll) == nil, nil
	}), "the API server never reached the webhook over the rotator's certificate")
	require.NoError(t, c.Create(ctx, d))
	assert.Contains(t, d.Spec.Template.Annotations, inject.AnnotationStatus, "created through the webhook: injected")
}

func readShipped(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "kustomize", "injector", file))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, into), file)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func assetsDir(t *testing.T) string {
	t.Helper()
	if a := os.Getenv("KUBEBUILDER_ASSETS"); a != "" {
		return a
	}
	return filepath.Join(repoRoot(), "bin")
}
