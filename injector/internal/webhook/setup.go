package webhook

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/pkg/configmap"
)

// The rotator reads its Secret and updates the webhook configuration's caBundle.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",namespace=kagenti-system,resources=secrets,verbs=get;list;watch;update;patch

// Options are the injector's own command-line settings.
type Options struct {
	// ConfigPath is config.yaml; a missing file means the built-in defaults.
	ConfigPath string
	// Namespace is the injector's own namespace (never acted in; holds the certificate Secret).
	Namespace string
	// CertDir, when set, holds tls.crt/tls.key provided from outside (cert-manager) and disables the
	// rotator. Otherwise RotatorCertDir is where the rotator's Secret is mounted.
	CertDir        string
	RotatorCertDir string
	CertSecret     string
	WebhookConfig  string
	ServiceName    string
	// ExtraDNSNames are added to the rotator's serving certificate (tests reach it as localhost).
	ExtraDNSNames []string
}

// Setup loads the configuration, and registers the webhook with the manager's webhook server once
// a certificate is available: right away with --cert-dir, after the rotator has written one
// otherwise. srv must be the manager's webhook server (not yet added: GetWebhookServer adds it).
func Setup(ctx context.Context, mgr manager.Manager, srv webhook.Server, o Options, log logr.Logger) error {
	metrics := NewMetrics(ctrlmetrics.Registry)
	current, err := loadConfig(ctx, mgr, o.ConfigPath, metrics, log)
	if err != nil {
		return err
	}
	h := &Handler{Config: current, ExcludedNamespaces: []string{"kube-system", o.Namespace}, Metrics: metrics}
	register := func() {
		srv.Register(Path, HTTPHandler(h))
		mgr.GetWebhookServer() // adds the server to the manager, which starts it
	}
	if o.CertDir != "" {
		register()
		return nil
	}
	ready := make(chan struct{})
	err = rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: o.CertSecret},
		CertDir:        o.RotatorCertDir,
		CAName:         "kagenti-injector-ca",
		CAOrganization: "kagenti",
		DNSName:        fmt.Sprintf("%s.%s.svc", o.ServiceName, o.Namespace),
		ExtraDNSNames: append([]string{
			o.ServiceName, fmt.Sprintf("%s.%s", o.ServiceName, o.Namespace),
			fmt.Sprintf("%s.%s.svc.cluster.local", o.ServiceName, o.Namespace),
		}, o.ExtraDNSNames...),
		IsReady:    ready,
		Webhooks:   []rotator.WebhookInfo{{Name: o.WebhookConfig, Type: rotator.Mutating}},
		FieldOwner: "kagenti-injector",
		// Every replica serves, so every replica needs the certificate: no leader election.
		RequireLeaderElection: false,
	})
	if err != nil {
		return fmt.Errorf("setting up the certificate rotator: %w", err)
	}
	go func() {
		select {
		case <-ready:
			log.Info("serving certificate ready; starting the webhook server")
			register()
		case <-ctx.Done():
		}
	}()
	return nil
}

// loadConfig returns the current configuration: followed with a Watcher when the file exists, the
// built-in defaults otherwise.
func loadConfig(ctx context.Context, mgr manager.Manager, path string, m *Metrics, log logr.Logger) (func() *config.Config, error) {
	if path == "" {
		log.Info("no --config given: using the built-in defaults")
		return staticConfig(config.Default()), nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		log.Info("configuration file missing: using the built-in defaults", "path", path)
		return staticConfig(config.Default()), nil
	}
	w, err := configmap.NewWatcher(path, config.Parse, log.WithName("config"))
	if err != nil {
		return nil, err
	}
	m.ConfigReloads.WithLabelValues("success").Inc()
	w.OnLoad(func(c *config.Config) {
		m.ConfigReloads.WithLabelValues("success").Inc()
		log.Info("configuration reloaded", "hash", c.Hash())
	})
	w.OnError(func(error) { m.ConfigReloads.WithLabelValues("error").Inc() })
	if err := mgr.Add(manager.RunnableFunc(w.Run)); err != nil {
		return nil, err
	}
	return w.Current, nil
}

func staticConfig(c *config.Config) func() *config.Config { return func() *config.Config { return c } }

func ptrTrue() *bool { t := true; return &t }

// HTTPHandler wraps an admission handler as the http.Handler served at Path.
func HTTPHandler(h admission.Handler) *webhook.Admission {
	return &webhook.Admission{Handler: h, RecoverPanic: ptrTrue()}
}
