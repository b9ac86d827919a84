// Command kagenti-tokenexchange runs the tokenexchange controller.
package main

import (
	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kagenti/platform/pkg/duck/kit/command"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/controller"
	txwebhook "github.com/kagenti/platform/tokenexchange/internal/webhook"
)

func main() { command.Main(options()) }

func options() command.Options {
	var opts controller.Options
	return command.Options{
		Name:            "kagenti-tokenexchange",
		Short:           "Runs the Kagenti tokenexchange controller",
		LeaderElectHelp: "elect a leader so that only one replica reconciles (the webhook serves on every replica)",
		Webhook: &command.WebhookFlags{Optional: "serve the validating webhook for TokenExchange (the clientNameTemplate check, for CRDs older than this binary)",
			ConfigKind: "ValidatingWebhookConfiguration", ConfigName: "kagenti-tokenexchange", CertSecret: "kagenti-tokenexchange-cert",
			ServiceName: "kagenti-tokenexchange-webhook", NamespaceHelp: "the controller's own namespace: holds the certificate Secret",
			NewServer: func(o webhook.Options) webhook.Server { return txwebhook.NewServer(o) }},
		Flags: func(f *pflag.FlagSet) {
			f.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", 4, "number of TokenExchanges reconciled in parallel")
			f.BoolVar(&opts.RestartStartedWithoutContent, "restart-pods-started-before-config", true,
				"evict the pods of a workload that started before its TokenExchange's ConfigMap existed (applied together), so that their controller starts them with its startup settings")
			f.StringVar(&opts.RegistrarSocket, "registrar-spiffe-socket", "",
				"SPIRE agent's Workload API (unix:///path): register the clients of clientAuthentication jwtSVID with the controller's own JWT SVID; empty: such TokenExchanges are not served")
		},
		Scheme: command.SchemeWith(v1alpha1.AddToScheme),
		Cache: func([]string) cache.Options {
			return cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: controller.CacheByObject()}
		},
		Setup: func(mgr manager.Manager, rt command.Runtime) error {
			if rt.Webhook {
				c := rt.Cert
				opts.Webhook = &txwebhook.Options{CertDir: c.CertDir, RotatorCertDir: c.RotatorCertDir, CertSecret: c.CertSecret,
					WebhookConfig: c.WebhookConfig, ServiceName: c.ServiceName, Namespace: c.Namespace}
			}
			opts.Namespaces = rt.Namespaces
			return controller.Setup(mgr, opts)
		},
	}
}

// Every binary authenticates and authorizes the scrapers of its metrics endpoint with the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
