// Command kagenti-agentbuild runs the agentbuild controller.
package main

import (
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/controller"
	"github.com/kagenti/platform/agentbuild/internal/tekton"
	"github.com/kagenti/platform/pkg/duck/kit/command"
)

func main() { command.Main(options()) }

func options() command.Options {
	var opts controller.Options
	return command.Options{
		Name:  "kagenti-agentbuild",
		Short: "Runs the Kagenti agentbuild controller",
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&opts.TemplateNamespace, "template-namespace", "kagenti-system",
				"namespace of the default build templates (pipeline-template-<mode> and step ConfigMaps labelled kagenti.io/build-template=true); the AgentBuild's own namespace is searched first")
			f.DurationVar(&opts.TektonCheckInterval, "tekton-check-interval", 30*time.Second,
				"how often builds waiting for Tekton Pipelines to be installed are retried")
			f.DurationVar(&opts.TemplateRetryInterval, "template-retry-interval", time.Minute,
				"how often builds whose template or step ConfigMap is missing or invalid are retried")
			f.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", controller.DefaultMaxConcurrentReconciles, "AgentBuilds reconciled in parallel")
		},
		Scheme: command.SchemeWith(v1alpha1.AddToScheme, tekton.AddToScheme),
		// Cached objects keep only what the controller reads (no managedFields, runs trimmed).
		Cache: controller.CacheOptions,
		Setup: func(mgr manager.Manager, rt command.Runtime) error {
			opts.Namespaces = rt.Namespaces
			return controller.Setup(mgr, opts)
		},
	}
}

// Every binary authenticates and authorizes the scrapers of its metrics endpoint with the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
