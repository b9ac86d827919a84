// Command kagenti-netpol runs the netpol controller.
package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kagenti/platform/netpol/internal/controller"
	"github.com/kagenti/platform/pkg/duck/kit/command"
)

func main() { command.Main(options()) }

func options() command.Options {
	var (
		qps       float32
		burst     int
		opts      = controller.DefaultOptions()
		dnsLabels = labelsFlag(opts.Policy.DNSPodLabels)
	)
	return command.Options{
		Name:  "kagenti-netpol",
		Short: "Runs the Kagenti netpol controller",
		Flags: func(f *pflag.FlagSet) {
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
		},
		Prepare: func() error {
			opts.Policy.DNSPodLabels = dnsLabels
			return opts.Validate()
		},
		Scheme:     controller.NewScheme,
		RESTConfig: func(cfg *rest.Config) { cfg.QPS, cfg.Burst = qps, burst },
		Cache: func([]string) cache.Options {
			return cache.Options{ByObject: controller.CacheByObject(), DefaultTransform: controller.DefaultTransform()}
		},
		Setup: func(mgr manager.Manager, _ command.Runtime) error { return controller.Setup(mgr, opts) },
	}
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
