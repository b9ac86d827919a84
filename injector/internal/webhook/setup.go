package webhook

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"os"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/pkg/configmap/certfiles"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// The rotator reads its Secret and updates the webhook configuration's caBundle.
// Its informers list and watch the kind (RBAC cannot restrict a list without a name field selector,
// and cert-controller's cache sets none); it writes only the configuration and the Secret named by
// the default flags. Renaming either needs the same change in the RBAC (docs/security.md).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,resourceNames=kagenti-injector,verbs=update
// +kubebuilder:rbac:groups="",namespace=kagenti-system,resources=secrets,verbs=list;watch
// +kubebuilder:rbac:groups="",namespace=kagenti-system,resources=secrets,resourceNames=kagenti-injector-cert,verbs=update

// Options are the injector's own command-line settings.
type Options struct {
	// ConfigPath is config.yaml; a missing file means the built-in defaults.
	ConfigPath string
	// Namespace is the injector's own namespace (never acted in; holds the certificate Secret).
	Namespace string
	// CertDir, when set, holds tls.crt/tls.key provided from outside (cert-manager) and disables the
	// rotator. Otherwise the rotator's certificate is written into RotatorCertDir (an emptyDir) from
	// its Secret as soon as the API server has it (certfiles), not when the kubelet syncs a volume.
	CertDir        string
	RotatorCertDir string
	CertSecret     string
	WebhookConfig  string
	ServiceName    string
	// ExtraDNSNames are added to the rotator's serving certificate (tests reach it as localhost).
	ExtraDNSNames []string
	// RotatorName names the rotator's controller (unique per process; its metrics carry it).
	// Default: kagenti-injector-cert-rotator.
	RotatorName string
	// Registry receives the webhook's metrics; nil means controller-runtime's registry, which the
	// manager serves on /metrics.
	Registry prometheus.Registerer
}

// Setup loads the configuration and registers the webhook on the manager's webhook server, which
// must come from NewServer, before the manager starts; it opens that server once a certificate is
// available: right away with --cert-dir, once the rotator has written one otherwise.
func Setup(mgr manager.Manager, o Options, log logr.Logger) error {
	srv, err := certfiles.ServerOf(mgr)
	if err != nil {
		return err
	}
	reg := o.Registry
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	metrics := NewMetrics(reg)
	current, err := loadConfig(mgr, o.ConfigPath, metrics, log)
	if err != nil {
		return err
	}
	levels := &NamespaceLevels{}
	// Registered once the manager starts (an informer needs the API server's discovery): a watch that
	// cannot be set up costs the warnings, never the webhook.
	if err := mgr.Add(everyReplica(func(ctx context.Context) error {
		if err := levels.Watch(ctx, mgr.GetCache()); err != nil {
			log.Error(err, "no Pod Security warnings: the namespaces' levels are not watched")
		}
		return nil
	})); err != nil {
		return err
	}
	h := &Handler{Config: current, ExcludedNamespaces: []string{"kube-system", o.Namespace}, Metrics: metrics, PodSecurity: levels}
	srv.Register(Path, HTTPHandler(h))
	return srv.Open(mgr, o.CertDir, certfiles.Rotation{Namespace: o.Namespace, Secret: o.CertSecret, Dir: o.RotatorCertDir,
		ServiceName: o.ServiceName, ExtraDNSNames: o.ExtraDNSNames,
		CAName: "kagenti-injector-ca", FieldOwner: "kagenti-injector", Name: cmp.Or(o.RotatorName, "kagenti-injector-cert-rotator"),
		Webhooks: []rotator.WebhookInfo{{Name: o.WebhookConfig, Type: rotator.Mutating}},
	}, log)
}

// loadConfig returns the current configuration: followed with a Watcher when the file exists, the
// built-in defaults otherwise.
func loadConfig(mgr manager.Manager, path string, m *Metrics, log logr.Logger) (func() *config.Config, error) {
	if path == "" {
		log.Info("no --config given: using the built-in defaults")
		return staticConfig(config.Default()), nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		log.Info("configuration file missing: using the built-in defaults", "path", path)
		return staticConfig(config.Default()), nil
	}
	w, err := kit.NewWatcher(path, config.Parse, log.WithName("config"))
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

// everyReplica is a manager.Runnable that runs on every replica (the injector elects no leader).
type everyReplica func(ctx context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }
