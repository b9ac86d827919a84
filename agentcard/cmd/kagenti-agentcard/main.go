// Command kagenti-agentcard runs the agentcard controller.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/controller"
	"github.com/kagenti/platform/agentcard/internal/discovery"
)

const name = "kagenti-agentcard"

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	var (
		metricsAddr, probeAddr, namespaces string
		leaderElect                        bool
		opts                               controller.Options
		disc                               discovery.Options
		zapOpts                            = zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	)
	cmd := &cobra.Command{
		Use:           name,
		Short:         "Runs the Kagenti agentcard controller",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			return run(metricsAddr, probeAddr, namespaces, leaderElect, opts, disc)
		},
	}
	f := cmd.Flags()
	f.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address the Prometheus metrics endpoint binds to; 0 disables it")
	f.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address the /healthz and /readyz endpoints bind to")
	f.BoolVar(&leaderElect, "leader-elect", false, "elect a leader so that only one replica reconciles")
	f.StringVar(&namespaces, "namespaces", "", "comma-separated namespaces to watch; empty watches all")
	f.BoolVar(&opts.RequireSignature, "require-signature", false, "default of spec.requireSignature: Ready needs a verified signature bound to the workload identity")
	f.StringVar(&opts.TrustBundleConfigMap, "trust-bundle-configmap", "", "namespace/name of the SPIRE trust bundle ConfigMap (PEM or SPIFFE JSON bundle); empty: no signature can verify")
	f.StringVar(&opts.TrustBundleKey, "trust-bundle-key", "bundle.crt", "key of the trust bundle in the ConfigMap")
	f.StringVar(&opts.TrustDomain, "trust-domain", "cluster.local", "SPIFFE trust domain of the workloads (default of spec.identityBinding.trustDomain)")
	f.IntVar(&opts.MaxConcurrentFetches, "max-concurrent-fetches", 64, "card fetches in flight across all AgentCards")
	f.DurationVar(&opts.FetchTimeout, "fetch-timeout", 5*time.Second, "timeout of one card fetch")
	f.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", 16, "AgentCards synced in parallel")
	f.BoolVar(&opts.AutoCreate, "auto-create", true, "create an AgentCard for every workload labelled kagenti.io/type=agent")
	f.StringSliceVar(&opts.CrossNamespaceIdentities, "cross-namespace-identities", nil, "comma-separated SPIFFE ID patterns (path.Match: * stays within one path segment) that spec.identityBinding.spiffeID of an AgentCard in any namespace may name; by default an AgentCard binds only identities of its own namespace (spiffe://<trust domain>/ns/<namespace>/...)")
	f.IntVar(&opts.MaxCachedCardBytes, "max-cached-card-bytes", controller.DefaultMaxCachedCardBytes, "bytes of agent cards kept between syncs, once per distinct card; a card beyond it is fetched in full on every sync")
	f.StringVar(&disc.BindAddress, "discovery-bind-address", ":8090", "address of the discovery API (GET /v1/agents); 0 disables it")
	f.BoolVar(&disc.AllowAnonymous, "allow-anonymous", false, "serve the discovery API without authentication (TokenReview) and authorization (SubjectAccessReview)")
	f.StringVar(&disc.CertFile, "discovery-tls-cert-file", "", "TLS certificate of the discovery API; empty serves plain HTTP")
	f.StringVar(&disc.KeyFile, "discovery-tls-key-file", "", "TLS key of the discovery API")
	// --kubeconfig comes from controller-runtime's config package, the zap flags from zapOpts.
	zapFlags := flag.NewFlagSet("zap", flag.ExitOnError)
	zapOpts.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	f.AddGoFlagSet(flag.CommandLine)
	cmd.AddCommand(newSignCommand(), newDevCACommand(), newDevSVIDCommand(), newServeSampleCardCommand())
	return cmd
}

func run(metricsAddr, probeAddr, namespaces string, leaderElect bool, opts controller.Options, disc discovery.Options) error {
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
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              name + ".kagenti.io",
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cache.Options{DefaultNamespaces: namespaceSet(namespaces)},
		// Workloads of any kind are read unstructured (pkg/duck): serve them from the cache too.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		return err
	}
	if err := controller.Setup(mgr, opts); err != nil {
		return err
	}
	if err := discovery.Setup(mgr, disc); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
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
