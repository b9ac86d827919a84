// Command kagenti-injector runs the mutating admission webhook that injects the identity
// infrastructure into labelled workloads.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kagenti/platform/injector/internal/certs"
	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
	"github.com/kagenti/platform/pkg/duck/kit/memlimit"
	"github.com/kagenti/platform/pkg/duck/kit/metricsauth"
)

const name = "kagenti-injector"

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type flags struct {
	metricsAddr, probeAddr, namespaces string
	leaderElect                        bool
	metricsSecure                      bool
	webhookHost                        string
	webhookPort                        int
	opts                               injectorwebhook.Options
}

func newRootCommand() *cobra.Command {
	var (
		fl      flags
		zapOpts = zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	)
	cmd := &cobra.Command{
		Use:           name,
		Short:         "Runs the Kagenti injector: the mutating webhook that injects the identity infrastructure",
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
	f.BoolVar(&fl.leaderElect, "leader-elect", false, "accepted for uniformity with the other binaries; the webhook serves on every replica and needs no leader")
	f.StringVar(&fl.namespaces, "namespaces", "", "comma-separated namespaces the manager's cache may watch; empty watches all (the webhook itself reads nothing)")
	f.StringVar(&fl.opts.ConfigPath, "config", "/etc/kagenti-injector/config.yaml", "path of config.yaml (hot-reloaded); a missing file means the built-in defaults")
	f.StringVar(&fl.webhookHost, "webhook-host", "", "address the webhook server binds to; empty binds all")
	f.IntVar(&fl.webhookPort, "webhook-port", 9443, "port of the webhook server")
	f.StringVar(&fl.opts.CertDir, "cert-dir", "", "directory with tls.crt and tls.key provided from outside (e.g. cert-manager); disables the built-in certificate rotator")
	f.StringVar(&fl.opts.RotatorCertDir, "rotator-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "where the rotator's certificate Secret is mounted (without --cert-dir)")
	f.StringVar(&fl.opts.CertSecret, "cert-secret", "kagenti-injector-cert", "Secret (in --namespace) holding the CA and serving certificate managed by the rotator")
	f.StringVar(&fl.opts.WebhookConfig, "webhook-config-name", "kagenti-injector", "MutatingWebhookConfiguration whose caBundle the rotator keeps current")
	f.StringVar(&fl.opts.ServiceName, "service-name", "kagenti-injector", "Service in front of the webhook (the certificate is issued for <service>.<namespace>.svc)")
	f.StringVar(&fl.opts.Namespace, "namespace", envOr("POD_NAMESPACE", "kagenti-system"), "the injector's own namespace: holds the certificate Secret and is never injected into")
	// --kubeconfig comes from controller-runtime's config package, the zap flags from zapOpts.
	zapFlags := flag.NewFlagSet("zap", flag.ExitOnError)
	zapOpts.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	f.AddGoFlagSet(flag.CommandLine)
	cmd.AddCommand(newGenCertsCommand())
	return cmd
}

func newGenCertsCommand() *cobra.Command {
	var (
		outDir   string
		hosts    []string
		validity time.Duration
	)
	cmd := &cobra.Command{
		Use:   "gen-certs",
		Short: "Writes a self-signed CA (ca.crt) and a serving certificate (tls.crt, tls.key) for --cert-dir",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := certs.Generate(hosts, validity)
			if err != nil {
				return err
			}
			if err := b.Write(outDir); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s/{%s,%s,%s} for %s\n", outDir, certs.CAFile, certs.CertFile, certs.KeyFile, strings.Join(hosts, ","))
			return nil
		},
	}
	cmd.Flags().StringVar(&outDir, "out-dir", "", "directory to write the files to (created if missing)")
	cmd.Flags().StringSliceVar(&hosts, "host", []string{"127.0.0.1"}, "IP addresses or DNS names of the certificate (repeatable)")
	cmd.Flags().DurationVar(&validity, "validity", 365*24*time.Hour, "how long the certificates are valid")
	_ = cmd.MarkFlagRequired("out-dir")
	return cmd
}

func run(fl flags) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	srvOpts := webhook.Options{Host: fl.webhookHost, Port: fl.webhookPort, CertDir: fl.opts.CertDir}
	if fl.opts.CertDir == "" {
		srvOpts.CertDir = fl.opts.RotatorCertDir
	}
	srv := injectorwebhook.NewServer(srvOpts)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsauth.ServerOptions(fl.metricsAddr, fl.metricsSecure),
		HealthProbeBindAddress: fl.probeAddr,
		WebhookServer:          srv,
		Cache: cache.Options{DefaultNamespaces: namespaceSet(fl.namespaces),
			// Namespaces are read for their Pod Security labels only.
			ByObject: map[client.Object]cache.ByObject{&corev1.Namespace{}: {Transform: injectorwebhook.TrimNamespace}}},
	})
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := injectorwebhook.Setup(mgr, fl.opts, ctrl.Log.WithName("injector")); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	// Ready only once the webhook server serves TLS, i.e. once the certificate is loaded.
	if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
		return err
	}
	return mgr.Start(ctx)
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

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Every binary authenticates and authorizes the scrapers of its metrics endpoint with the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
