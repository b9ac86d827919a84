// Command kagenti-netpol runs the netpol controller.
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/netpol/internal/controller"
	"github.com/kagenti/platform/pkg/duck/kit/memlimit"
	"github.com/kagenti/platform/pkg/duck/kit/metricsauth"
)

const name = "kagenti-netpol"

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
		qps                               float32
		burst                             int
		opts                              = controller.DefaultOptions()
		dnsLabels                         = labelsFlag(opts.Policy.DNSPodLabels)
		zapOpts                           = zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	)
	cmd := &cobra.Command{
		Use:           name,
		Short:         "Runs the Kagenti netpol controller",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			memlimit.SetFromContainer(ctrl.Log.WithName("setup"))
			opts.Policy.DNSPodLabels = dnsLabels
			if err := opts.Validate(); err != nil {
				return err
			}
			return run(metricsauth.ServerOptions(metricsAddr, metricsSecure), probeAddr, pprofAddr, namespaces, leaderElect, qps, burst, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "address the Prometheus metrics endpoint binds to; 0 disables it")
	f.BoolVar(&metricsSecure, "metrics-secure", true, "serve metrics over HTTPS to callers the API server authenticates and authorizes for GET /metrics (ClusterRole kagenti-metrics-reader); false serves plain HTTP to anyone")
	f.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address the /healthz and /readyz endpoints bind to")
	f.StringVar(&pprofAddr, "pprof-bind-address", "0", "address net/http/pprof binds to, for profiling; 0 disables it")
	f.BoolVar(&leaderElect, "leader-elect", false, "elect a leader so that only one replica reconciles")
	f.StringVar(&namespaces, "namespaces", "", "comma-separated namespaces to watch; empty watches all")
	f.StringVar(&opts.Mode, "mode", opts.Mode, "enforce writes NetworkPolicies; audit computes them and reports on the AgentCard without writing; off removes the policies it wrote")
	f.StringVar(&opts.Policy.Egress, "egress", opts.Policy.Egress, "egress of verified agents: all (unrestricted) or verified (other verified agents, DNS and --egress-cidrs)")
	f.StringSliceVar(&opts.Policy.EgressCIDRs, "egress-cidrs", nil, "comma-separated CIDRs verified agents may reach when --egress=verified")
	f.StringVar(&opts.Policy.OperatorNamespace, "operator-namespace", opts.Policy.OperatorNamespace, "namespace whose pods may always reach agents (agentcard fetches cards from there)")
	f.StringVar(&opts.Policy.DNSNamespace, "dns-namespace", opts.Policy.DNSNamespace, "namespace of the cluster DNS pods every agent may reach on port 53")
	f.Var(&dnsLabels, "dns-labels", "comma-separated key=value labels of the cluster DNS pods")
	f.Float32Var(&qps, "kube-api-qps", controller.DefaultQPS, "queries per second to the API server; negative is no client-side limit (the API server's priority and fairness paces the client)")
	f.IntVar(&burst, "kube-api-burst", controller.DefaultBurst, "burst of queries to the API server")
	f.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", opts.MaxConcurrentReconciles, "AgentCards reconciled in parallel")
	f.DurationVar(&opts.CRDPollInterval, "crd-poll-interval", opts.CRDPollInterval, "how often to look for the AgentCard CRD while it is not installed")
	// --kubeconfig comes from controller-runtime's config package, the zap flags from zapOpts.
	zapFlags := flag.NewFlagSet("zap", flag.ExitOnError)
	zapOpts.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	f.AddGoFlagSet(flag.CommandLine)
	return cmd
}

func run(metrics metricsserver.Options, probeAddr, pprofAddr, namespaces string, leaderElect bool, qps float32, burst int, opts controller.Options) error {
	scheme, err := controller.NewScheme()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = qps, burst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metrics,
		HealthProbeBindAddress:        probeAddr,
		PprofBindAddress:              pprofAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              name + ".kagenti.io",
		LeaderElectionReleaseOnCancel: true,
		Cache: cache.Options{
			DefaultNamespaces: namespaceSet(namespaces),
			ByObject:          controller.CacheByObject(),
			DefaultTransform:  controller.DefaultTransform(),
		},
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

// labelsFlag is a "k=v,k=v" flag.
type labelsFlag map[string]string

func (l *labelsFlag) String() string {
	keys := make([]string, 0, len(*l))
	for k := range *l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+(*l)[k])
	}
	return strings.Join(parts, ",")
}

func (l *labelsFlag) Set(v string) error {
	m, err := labels.ConvertSelectorToLabelsMap(v)
	if err != nil {
		return fmt.Errorf("want key=value[,key=value]: %w", err)
	}
	*l = labelsFlag(m)
	return nil
}

func (l *labelsFlag) Type() string { return "labels" }

// Every binary authenticates and authorizes the scrapers of its metrics endpoint with the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
