// Command kagenti-agenttrace runs the agenttrace controller.
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/agenttrace/internal/controller"
	"github.com/kagenti/platform/pkg/duck/kit/memlimit"
	"github.com/kagenti/platform/pkg/duck/kit/metricsauth"
)

const name = "kagenti-agenttrace"

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	var (
		metricsAddr, probeAddr, pprofAddr string
		namespaces                        string
		leaderElect                       bool
		metricsSecure                     bool
		opts                              controller.Options
		zapOpts                           = zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	)
	cmd := &cobra.Command{
		Use:           name,
		Short:         "Runs the Kagenti agenttrace controller",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			memlimit.SetFromContainer(ctrl.Log.WithName("setup"))
			return run(metricsauth.ServerOptions(metricsAddr, metricsSecure), probeAddr, pprofAddr, namespaces, leaderElect, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "address the Prometheus metrics endpoint binds to; 0 disables it")
	f.BoolVar(&metricsSecure, "metrics-secure", true, "serve metrics over HTTPS to callers the API server authenticates and authorizes for GET /metrics (ClusterRole kagenti-metrics-reader); false serves plain HTTP to anyone")
	f.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address the /healthz and /readyz endpoints bind to")
	f.StringVar(&pprofAddr, "pprof-bind-address", "0", "address net/http/pprof binds to, for profiling; 0 disables it")
	f.BoolVar(&leaderElect, "leader-elect", false, "elect a leader so that only one replica reconciles")
	f.StringVar(&namespaces, "namespaces", "", "comma-separated namespaces to watch; empty watches all")
	f.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", 4, "AgentTraces reconciled in parallel")
	f.DurationVar(&opts.NotOwnedRetry, "not-owned-retry", 10*time.Second, "how soon to retry when the trace ConfigMap belongs to someone else")
	// --kubeconfig comes from controller-runtime's config package, the zap flags from zapOpts.
	zapFlags := flag.NewFlagSet("zap", flag.ExitOnError)
	zapOpts.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	f.AddGoFlagSet(flag.CommandLine)
	return cmd
}

func run(metrics metricsserver.Options, probeAddr, pprofAddr, namespaces string, leaderElect bool, opts controller.Options) error {
	opts.Namespaces = slices.Sorted(maps.Keys(namespaceSet(namespaces)))
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
		Metrics:                       metrics,
		HealthProbeBindAddress:        probeAddr,
		PprofBindAddress:              pprofAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              name + ".kagenti.io",
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOptions(namespaces),
		Client:                        controller.ClientOptions(),
	})
	if err != nil {
		return err
	}
	if err := controller.Setup(mgr, opts); err != nil {
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

// cacheOptions is the controller's cache restricted to the --namespaces list.
func cacheOptions(namespaces string) cache.Options {
	o := controller.CacheOptions()
	o.DefaultNamespaces = namespaceSet(namespaces)
	return o
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
