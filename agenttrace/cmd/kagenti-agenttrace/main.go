// Command kagenti-agenttrace runs the agenttrace controller.
package main

import (
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/agenttrace/internal/controller"
	"github.com/kagenti/platform/pkg/duck/kit/command"
)

func main() { command.Main(options()) }

func options() command.Options {
	var opts controller.Options
	return command.Options{
		Name:  "kagenti-agenttrace",
		Short: "Runs the Kagenti agenttrace controller",
		Flags: func(f *pflag.FlagSet) {
			f.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", 4, "AgentTraces reconciled in parallel")
			f.DurationVar(&opts.NotOwnedRetry, "not-owned-retry", 10*time.Second, "how soon to retry when the trace ConfigMap belongs to someone else")
		},
		Scheme: command.SchemeWith(v1alpha1.AddToScheme),
		Cache:  func([]string) cache.Options { return controller.CacheOptions() },
		Client: controller.ClientOptions(),
		Setup: func(mgr manager.Manager, rt command.Runtime) error {
			opts.Namespaces = rt.Namespaces
			return controller.Setup(mgr, opts)
		},
	}
}

// Every binary authenticates and authorizes the scrapers of its metrics endpoint with the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
