// Command kagenti-tokenexchange runs the tokenexchange controller.
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kagenti/platform/pkg/duck/kit/memlimit"
	"github.com/kagenti/platform/pkg/duck/kit/metricsauth"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/controller"
	txwebhook "github.com/kagenti/platform/tokenexchange/internal/webhook"
)

const name = "kagenti-tokenexchange"

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	var (
		fl      flags
		zapOpts = zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	)
	cmd := &cobra.Command{
		Use:           name,
		Short:         "Runs the Kagenti tokenexchange controller",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			memlimit.SetFromContainer(ctrl.Log.WithName("setup"))
			return run(fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.metricsAddr, "metrics-bind-address", ":8443", "address the Prometheus metrics endpoint binds to; 0 disables it")
	f.BoolVar(&fl.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS to callers the API server authenticates and authorizes for GET /metrics (ClusterRole kagenti-metrics-reader); false serves plain HTTP to anyone")
	f.StringVar(&fl.probeAddr, "health-probe-bind-address", ":8081", "address the /healthz and /readyz endpoints bind to")
	f.StringVar(&fl.pprofAddr, "pprof-bind-address", "0", "address net/http/pprof binds to, for profiling; 0 disables it")
	f.BoolVar(&fl.leaderElect, "leader-elect", false, "elect a leader so that only one replica reconciles (the webhook serves on every replica)")
	f.StringVar(&fl.namespaces, "namespaces", "", "comma-separated namespaces to watch; empty watches all")
	f.IntVar(&fl.opts.MaxConcurrentReconciles, "max-concurrent-reconciles", 4, "number of TokenExchanges reconciled in parallel")
	f.BoolVar(&fl.webhook, "webhook", false, "serve the validating webhook for TokenExchange (the clientNameTemplate check, for CRDs older than this binary)")
	f.StringVar(&fl.webhookHost, "webhook-host", "", "address the webhook server binds to; empty binds all")
	f.IntVar(&fl.webhookPort, "webhook-port", 9443, "port of the webhook server")
	f.StringVar(&fl.wh.CertDir, "cert-dir", "", "directory with tls.crt and tls.key provided from outside (e.g. cert-manager); disables the built-in certificate rotator")
	f.StringVar(&fl.wh.RotatorCertDir, "rotator-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "where the rotator's certificate Secret is mounted (without --cert-dir)")
	f.StringVar(&fl.wh.CertSecret, "cert-secret", "kagenti-tokenexchange-cert", "Secret (in --namespace) holding the CA and serving certificate managed by the rotator")
	f.StringVar(&fl.wh.WebhookConfig, "webhook-config-name", "kagenti-tokenexchange", "ValidatingWebhookConfiguration whose caBundle the rotator keeps current")
	f.StringVar(&fl.wh.ServiceName, "service-name", "kagenti-tokenexchange-webhook", "Service in front of the webhook (the certificate is issued for <service>.<namespace>.svc)")
	f.StringVar(&fl.wh.Namespace, "namespace", envOr("POD_NAMESPACE", "kagenti-system"), "the controller's own namespace: holds the certificate Secret")
	// --kubeconfig comes from controller-runtime's config package, the zap flags from zapOpts.
	zapFlags := flag.NewFlagSet("zap", flag.ExitOnError)
	zapOpts.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	f.AddGoFlagSet(flag.CommandLine)
	return cmd
}

// flags are the command-line settings of the controller.
type flags struct {
	metricsAddr, probeAddr, pprofAddr string
	namespaces                        string
	leaderElect                       bool
	metricsSecure                     bool
	opts                              controller.Options
	webhook                           bool
	webhookHost                       string
	webhookPort                       int
	wh                                txwebhook.Options
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

func run(fl flags) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	certDir := fl.wh.CertDir
	if certDir == "" {
		certDir = fl.wh.RotatorCertDir
	}
	srv := txwebhook.NewServer(webhook.Options{Host: fl.webhookHost, Port: fl.webhookPort, CertDir: certDir})
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsauth.ServerOptions(fl.metricsAddr, fl.metricsSecure),
		HealthProbeBindAddress:        fl.probeAddr,
		PprofBindAddress:              fl.pprofAddr,
		LeaderElection:                fl.leaderElect,
		LeaderElectionID:              name + ".kagenti.io",
		LeaderElectionReleaseOnCancel: true,
		Cache: cache.Options{
			DefaultNamespaces: namespaceSet(fl.namespaces),
			DefaultTransform:  cache.TransformStripManagedFields(),
			ByObject:          controller.CacheByObject(),
		},
		WebhookServer: srv,
	})
	if err != nil {
		return err
	}
	if fl.webhook {
		fl.opts.Webhook = &fl.wh
	}
	fl.opts.Namespaces = slices.Sorted(maps.Keys(namespaceSet(fl.namespaces)))
	if err := controller.Setup(mgr, fl.opts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	if fl.webhook {
		// Ready only once the webhook serves TLS, i.e. once its certificate is loaded.
		if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
			return err
		}
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// namespaceSet turns "a,b" into the cache's per-namespace configuration; nil watches all namespaces.
func namespaceSet(list string) map[string]cache.Config {
	var out map[string]cache.Config
	for _, ns := range strings.Split(list, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			if out == nil {
				out = map[string]cache.Config{}
			}
			out[ns] = cache.Config{}
		}
	}
	return out
}

// Every binary authenticates and authorizes the scrapers of its metrics endpoint with the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
