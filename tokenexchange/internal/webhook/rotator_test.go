package webhook_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/webhook"
)

const (
	systemNS   = "kagenti-system"
	certSecret = "kagenti-tokenexchange-cert"
	configName = "kagenti-tokenexchange"
	service    = "kagenti-tokenexchange-webhook"
)

// TestRotatorServesShippedWebhook installs the shipped Secret, ValidatingWebhookConfiguration and
// RBAC on a real API server, runs the webhook as the controller's ServiceAccount with only the
// shipped rights and with the built-in certificate rotator (the default of the deployed
// controller), and checks that the rotator issues the certificate for the Service, injects
// its CA into the configuration, and that the API server then calls the webhook over TLS and relays
// its denial. No kubelet plays the Secret volume: the certificate files come from the controller's own Syncer (certfiles).
func TestRotatorServesShippedWebhook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := repoRoot()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Setenv("KUBEBUILDER_ASSETS", filepath.Join(root, "bin"))
	}
	scheme := k8sruntime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))

	// The CRD without its clientNameTemplate rule, as on a cluster upgraded with helm, which never
	// upgrades the CRDs it installed: there the webhook is what rejects a bad template at admission.
	// (With the current CRD the API server rejects it before calling the webhook.)
	env := &envtest.Environment{CRDs: []*apiextensionsv1.CustomResourceDefinition{crdWithoutTemplateRule(t, root)}}
	cfg, err := env.Start()
	require.NoError(t, err, "starting envtest (binaries from `make tools`)")
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)

	// The shipped objects, as kustomize installs them. The API server reaches the webhook by URL
	// (there is no Service network here) on a name the rotator adds to the certificate.
	port := freePort(t)
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNS}}))
	installShippedRBAC(t, c, filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"))
	secret := &corev1.Secret{}
	readShipped(t, "secret.yaml", secret)
	require.NoError(t, c.Create(ctx, secret))
	wh := &admissionv1.ValidatingWebhookConfiguration{}
	readShipped(t, "validatingwebhookconfiguration.yaml", wh)
	require.Len(t, wh.Webhooks, 1)
	svcRef := wh.Webhooks[0].ClientConfig.Service
	require.Equal(t, service, svcRef.Name, "the configuration must name the Service the certificate is issued for")
	url := fmt.Sprintf("https://localhost:%d%s", port, *svcRef.Path)
	wh.Webhooks[0].ClientConfig = admissionv1.WebhookClientConfig{URL: &url}
	require.NoError(t, c.Create(ctx, wh))

	certDir := t.TempDir()
	// The controller runs as its ServiceAccount, with the shipped RBAC only.
	mgr, err := ctrl.NewManager(asServiceAccount(cfg, systemNS, "kagenti-tokenexchange"), ctrl.Options{
		Scheme:        scheme,
		Metrics:       metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir}),
	})
	require.NoError(t, err)
	require.NoError(t, webhook.Setup(mgr, webhook.Options{
		Namespace: systemNS, CertSecret: certSecret, RotatorCertDir: certDir, RotatorName: uniqueName(),
		WebhookConfig: configName, ServiceName: service, ExtraDNSNames: []string{"localhost"},
	}, mgr.GetLogger()))
	mgrCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	stopped := false
	stopManager := func() {
		if !stopped {
			stopped = true
			stop()
			require.NoError(t, <-done)
		}
	}
	t.Cleanup(stopManager)

	// The rotator fills the Secret with a CA and a certificate for the Service...
	require.NoError(t, wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(secret), secret)
		return err == nil && len(secret.Data["tls.crt"]) > 0, err
	}))
	block, _ := pem.Decode(secret.Data["tls.crt"])
	require.NotNil(t, block)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.Contains(t, cert.DNSNames, service+"."+systemNS+".svc")
	assert.Contains(t, cert.DNSNames, service+"."+systemNS+".svc.cluster.local")

	// ...and injects that CA into the shipped configuration.
	require.NoError(t, wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(wh), wh)
		return err == nil && len(wh.Webhooks[0].ClientConfig.CABundle) > 0, err
	}))
	assert.Equal(t, string(secret.Data["ca.crt"]), string(wh.Webhooks[0].ClientConfig.CABundle))

	// The API server calls the webhook over TLS once it serves, and relays the denial with the field
	// path. Dry runs, so that nothing is stored while the webhook is still starting.
	bomb, err := os.ReadFile(filepath.Join(root, "tokenexchange", "api", "v1alpha1", "testdata", "template-bomb.txt"))
	require.NoError(t, err)
	bad := tokenExchange("bad", string(bomb))
	var denial error
	require.NoError(t, wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		denial = c.Create(ctx, bad.DeepCopy(), client.DryRunAll)
		return denial != nil, nil
	}), "the webhook never denied an invalid clientNameTemplate")
	require.True(t, apierrors.IsInvalid(denial), "got %v", denial)
	assert.Contains(t, denial.Error(), `admission webhook "tokenexchange.kagenti.io" denied the request`)
	assert.Contains(t, denial.Error(), "spec.clientRegistration.keycloak.clientNameTemplate")
	assert.Contains(t, denial.Error(), "not a placeholder")
	t.Logf("denial: %v", denial)
	// Issue 26: a template naming another namespace's client is denied with the field path.
	takeover := c.Create(ctx, tokenExchange("takeover", "team-b/agent"), client.DryRunAll)
	require.True(t, apierrors.IsInvalid(takeover), "got %v", takeover)
	assert.Contains(t, takeover.Error(), `spec.clientRegistration.keycloak.clientNameTemplate: Invalid value: "team-b/agent": must start with {{.Namespace}} followed by '/'`)
	require.NoError(t, c.Create(ctx, tokenExchange("good", "{{.Namespace}}/agent-{{.PodName}}")))

	// failurePolicy Ignore: with the controller gone, writes still go through (the reconciler
	// reports InvalidSpec for them when it is back).
	stopManager()
	require.NoError(t, c.Create(ctx, bad.DeepCopy()), "with the webhook down, a TokenExchange must still be accepted")
}

// crdWithoutTemplateRule is the shipped TokenExchange CRD minus the CEL rules on clientNameTemplate.
func crdWithoutTemplateRule(t *testing.T, root string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "deploy", "crds", "tokenexchange", "kagenti.io_tokenexchanges.yaml"))
	require.NoError(t, err)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, yaml.UnmarshalStrict(data, crd))
	kc := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["clientRegistration"].Properties["keycloak"]
	tmpl := kc.Properties["clientNameTemplate"]
	require.NotEmpty(t, tmpl.XValidations, "the shipped CRD has no clientNameTemplate rule")
	tmpl.XValidations = nil
	kc.Properties["clientNameTemplate"] = tmpl // maps are shared: this edits crd
	return crd
}

func tokenExchange(name, tmpl string) *v1alpha1.TokenExchange {
	return &v1alpha1.TokenExchange{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1alpha1.TokenExchangeSpec{
			TargetRef:          duck.TargetRef{Kind: "Deployment", Name: "agent"},
			ClientRegistration: &v1alpha1.ClientRegistrationSpec{Keycloak: &v1alpha1.KeycloakSpec{ClientNameTemplate: tmpl}},
		},
	}
}

func readShipped(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "kustomize", "tokenexchange", file))
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

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return strings.TrimSuffix(filepath.Dir(file), filepath.Join("tokenexchange", "internal", "webhook"))
}
