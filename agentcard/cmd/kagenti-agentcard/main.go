// Command kagenti-agentcard runs the agentcard controller.
package main

import (
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/controller"
	"github.com/kagenti/platform/agentcard/internal/discovery"
	"github.com/kagenti/platform/agentcard/internal/federation"
	"github.com/kagenti/platform/pkg/duck/kit/command"
)

func main() { command.Main(options()) }

func newRootCommand() *cobra.Command { return command.NewCommand(options()) }

func options() command.Options {
	var (
		opts controller.Options
		disc discovery.Options
		fed  federation.Options
	)
	return command.Options{
		Name:  "kagenti-agentcard",
		Short: "Runs the Kagenti agentcard controller",
		Flags: func(f *pflag.FlagSet) {
			f.BoolVar(&opts.RequireSignature, "require-signature", false, "default of spec.requireSignature: Ready needs a verified signature bound to the workload identity")
			f.StringVar(&opts.TrustBundleConfigMap, "trust-bundle-configmap", "", "namespace/name of the SPIRE trust bundle ConfigMap (PEM or SPIFFE JSON bundle); empty: no signature can verify")
			f.StringVar(&opts.TrustBundleKey, "trust-bundle-key", "bundle.crt", "key of the trust bundle in the ConfigMap")
			f.StringVar(&opts.TrustDomain, "trust-domain", "cluster.local", "SPIFFE trust domain of the workloads (default of spec.identityBinding.trustDomain; the discovery API's requesters get spiffe://<trust domain>/ns/<namespace>/sa/<name> for ?access= and ?callable=)")
			f.IntVar(&opts.MaxConcurrentFetches, "max-concurrent-fetches", 64, "card fetches in flight across all AgentCards")
			f.DurationVar(&opts.FetchTimeout, "fetch-timeout", 5*time.Second, "timeout of one card fetch")
			f.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", 16, "AgentCards synced in parallel")
			f.BoolVar(&opts.AutoCreate, "auto-create", true, "create an AgentCard for every workload labelled kagenti.io/type=agent")
			f.StringSliceVar(&opts.CrossNamespaceIdentities, "cross-namespace-identities", nil, "comma-separated SPIFFE ID patterns (path.Match: * stays within one path segment) that spec.identityBinding.spiffeID of an AgentCard in any namespace may name; by default an AgentCard binds only identities of its own namespace (spiffe://<trust domain>/ns/<namespace>/...)")
			f.StringVar(&opts.FetchSPIFFESocket, "fetch-spiffe-socket", "", "SPIFFE Workload API socket (unix:///...) of the controller's own X.509-SVID: https cards, and http ones a pod answers 426 for TLS (a strict authbridge inbound), are then fetched over mutual TLS, the pod proving the identity its card is bound to")
			f.StringVar(&opts.FetchCertFile, "fetch-cert-file", "", "PEM X.509-SVID chain of the controller for fetching https cards over mutual TLS (with --fetch-key-file and --fetch-bundle-file; instead of --fetch-spiffe-socket)")
			f.StringVar(&opts.FetchKeyFile, "fetch-key-file", "", "PEM private key of --fetch-cert-file")
			f.StringVar(&opts.FetchBundleFile, "fetch-bundle-file", "", "PEM trust bundle of --trust-domain that the pods' SVIDs must chain to (with --fetch-cert-file)")
			f.IntVar(&opts.MaxCachedCardBytes, "max-cached-card-bytes", controller.DefaultMaxCachedCardBytes, "bytes of agent cards kept between syncs, once per distinct card; a card beyond it is fetched in full on every sync")
			f.StringVar(&disc.BindAddress, "discovery-bind-address", ":8090", "address of the discovery API (HTTPS, GET /v1/agents); 0 disables it")
			f.BoolVar(&disc.AllowAnonymous, "allow-anonymous", false, "serve the discovery API without authentication (TokenReview) and authorization (SubjectAccessReview)")
			f.StringSliceVar(&disc.Audiences, "discovery-audience", nil, "audience the discovery API's bearer tokens must be issued for (repeatable; TokenReview spec.audiences); empty accepts tokens for the API server's own audiences")
			f.BoolVar(&disc.Policies, "discovery-policies", false, "answer which agents the requester may call (?callable=, ?access=) from each workload's TokenExchange policy; watches every ConfigMap labelled app.kubernetes.io/component=token-exchange (needs ClusterRole kagenti-agentcard-policyreader)")
			f.StringVar(&disc.CertDir, "discovery-cert-dir", "", "directory with tls.crt and tls.key (and ca.crt) of the discovery API provided from outside (e.g. cert-manager); disables the built-in certificate rotator")
			f.StringVar(&disc.RotatorCertDir, "discovery-rotator-cert-dir", "/tmp/kagenti-agentcard/discovery-certs", "where agentcard writes the rotator's certificate from its Secret (an emptyDir; without --discovery-cert-dir)")
			f.StringVar(&disc.CertSecret, "discovery-cert-secret", "kagenti-agentcard-discovery-cert", "Secret (in --discovery-namespace) holding the CA and serving certificate managed by the rotator")
			f.StringVar(&disc.ServiceName, "discovery-service-name", "kagenti-agentcard-discovery", "Service in front of the discovery API (the certificate is issued for <service>.<namespace>.svc)")
			f.StringVar(&disc.Namespace, "discovery-namespace", command.EnvOr("POD_NAMESPACE", "kagenti-system"), "the controller's own namespace: holds the discovery API's certificate Secret and CA ConfigMap")
			f.StringVar(&disc.CAConfigMap, "discovery-ca-configmap", "kagenti-agentcard-discovery-ca", "ConfigMap (in --discovery-namespace) the discovery API's CA is published in (key ca.crt) for clients; empty does not publish it")
			f.Float64Var(&disc.RateLimit, "discovery-rate-limit", 20, "requests per second each client address may make to the discovery API (429 with Retry-After beyond); 0 disables the limit")
			f.IntVar(&disc.RateBurst, "discovery-rate-burst", 40, "burst of requests above --discovery-rate-limit a client address may make")
			f.DurationVar(&disc.AuthCacheTTL, "discovery-auth-cache-ttl", discovery.DefaultAuthCacheTTL, "how long a valid token and an allowed access are cached (never past the token's expiry)")
			f.DurationVar(&disc.AuthNegativeCacheTTL, "discovery-auth-negative-cache-ttl", discovery.DefaultAuthNegativeCacheTTL, "how long an invalid token and a denied access are cached")
			fed.BindFlags(f)
		},
		Commands: []*cobra.Command{newSignCommand(), newDevCACommand(), newDevSVIDCommand(), newServeSampleCardCommand()},
		// agentcard's heap is mostly its caches (pods, AgentCards, per-pod sync state and cards),
		// live as long as the process: at 50 the heap grows to one and a half times them between
		// collections instead of twice. At 1,000 AgentCards × 3 pods that is 56–58 MiB of RSS
		// instead of 62–65 MiB, for about the same CPU in the first sync (docs/benchmarks.md).
		GCPercent: 50,
		Scheme:    command.SchemeWith(v1alpha1.AddToScheme),
		// The pods are watched in the namespaces the manager's cache watches (controller.Setup).
		Cache:  func(ns []string) cache.Options { return controller.CacheOptions(command.NamespaceConfigs(ns)) },
		Client: controller.ClientOptions(),
		Setup: func(mgr manager.Manager, rt command.Runtime) error {
			opts.Namespaces = rt.Namespaces
			if err := controller.Setup(mgr, opts); err != nil {
				return err
			}
			// Before the discovery API: a hub serves its members' cards there. The context only
			// registers informers; the runnables get the manager's. A hub's leader labels its pod
			// (POD_NAME, else the hostname: a pod's own name).
			if fed.Pod == "" {
				host, _ := os.Hostname()
				fed.Pod = command.EnvOr("POD_NAME", host)
			}
			if err := federation.Setup(context.Background(), mgr, fed, &disc); err != nil {
				return err
			}
			disc.TrustDomain = opts.TrustDomain
			return discovery.Setup(mgr, disc)
		},
	}
}

// Every binary authenticates and authorizes the scrapers of its metrics endpoint with the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
