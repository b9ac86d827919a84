// Command kagenti-agentbuild runs the agentbuild controller.
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
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/controller"
	"github.com/kagenti/platform/agentbuild/internal/tekton"
	"github.com/kagenti/platform/pkg/duck/kit/memlimit"
	"github.com/kagenti/platform/pkg/duck/kit/metricsauth"
)

const name = "kagenti-agentbuild"

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
		Short:         "Runs the Kagenti agentbuild controller",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			memlimit.SetFromContainer(ctrl.Log.WithName("setup"))
			opts.Namespaces = namespaceList(namespaces)
			return run(metricsauth.ServerOptions(metricsAddr, metricsSecure), probeAddr, pprofAddr, opts.Namespaces, leaderElect, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "address the Prometheus metrics endpoint binds to; 0 disables it")
	f.BoolVar(&metricsSecure, "metrics-secure", true, "serve metrics over HTTPS to callers the API server authenticates and authorizes for GET /metrics (ClusterRole kagenti-metrics-reader); false serves plain HTTP to anyone")
	f.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address the /healthz and /readyz endpoints bind to")
	f.StringVar(&pprofAddr, "pprof-bind-address", "0", "address net/http/pprof binds to, for profiling; 0 disables it")
	f.BoolVar(&leaderElect, "leader-elect", false, "elect a leader so that only one replica reconciles")
	f.StringVar(&namespaces, "namespaces", "", "comma-separated namespaces to watch; empty watches all")
	f.StringVar(&opts.TemplateNamespace, "template-namespace", "kagenti-system",
		"namespace of the default build templates (pipeline-template-<mode> and step ConfigMaps labelled kagenti.io/build-template=true); the AgentBuild's own namespace is searched first")
	f.DurationVar(&opts.TektonCheckInterval, "tekton-check-interval", 30*time.Second,
		"how often builds waiting for Tekton Pipelines to be installed are retried")
	f.DurationVar(&opts.TemplateRetryInterval, "template-retry-interval", time.Minute,
		"how often builds whose template or step ConfigMap is missing or invalid are retried")
	f.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", controller.DefaultMaxConcurrentReconciles, "AgentBuilds reconciled in parallel")
	// --kubeconfig comes from controller-runtime's config package, the zap flags from zapOpts.
	zapFlags := flag.NewFlagSet("zap", flag.ExitOnError)
	zapOpts.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	f.AddGoFlagSet(flag.CommandLine)
	return cmd
}

func run(metrics metricsserver.Options, probeAddr, pprofAddr string, namespaces []string, leaderElect bool, opts controller.Options) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := tekton.AddToScheme(scheme); err != nil {
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
		// Cached objects keep only what the controller reads (no managedFields, runs trimmed).
		Cache: controller.CacheOptions(namespaces),
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

// namespaceList splits "a, b" into namespaces; nil (all namespaces) for an empty list.
func namespaceList(list string) []string {
	var out []string
	for _, ns := range strings.Split(list, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			out = append(out, ns)
		}
	}
	return out
}

// Every binary authenticates and authorizes the scrapers of its metrics endpoint with the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
