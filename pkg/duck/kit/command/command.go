// Package command is the one main of the six Kagenti controller binaries (Main): the flags they
// share, zap logging, the memory limit, the manager with authenticated metrics, health and readiness
// checks, leader election, pprof, cache and webhook server, and signal handling. Each binary adds its
// own flags and registration (Options). It is a package of its own, beside the rest of the kit, so
// that a binary links the kit's other parts (and pkg/duck) only when it uses them.
package command

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kagenti/platform/pkg/duck/kit/memlimit"
	"github.com/kagenti/platform/pkg/duck/kit/metricsauth"
)

// Options are what one Kagenti controller binary adds to the wiring all six share (Main): its
// name, its own flags, its scheme and cache, and the registration of its controllers.
type Options struct {
	// Name is the binary, kagenti-<pillar>: the command's name and, with ".kagenti.io", the
	// leader election lease. Short is the command's one-line description.
	Name, Short string
	// GCPercent, when not 0, is the garbage collector's target unless GOGC sets one (a binary
	// whose heap is mostly long-lived caches: at Go's default of 100 the heap grows to twice them
	// between collections, and the resident memory follows that peak).
	GCPercent int
	// LeaderElectHelp and NamespacesHelp replace the help of --leader-elect and --namespaces.
	LeaderElectHelp, NamespacesHelp string
	// WebhookOnly is for a binary that only serves a webhook on every replica (the injector): it
	// elects no leader (--leader-elect is accepted and ignored), has no --pprof-bind-address, and is
	// ready once its webhook serves.
	WebhookOnly bool
	// Webhook, when set, adds the webhook server and its certificate flags.
	Webhook *WebhookFlags
	// Flags registers the binary's own flags.
	Flags func(*pflag.FlagSet)
	// Commands are subcommands (gen-certs, sign, ...).
	Commands []*cobra.Command
	// Prepare runs once the flags are parsed and the logger set, before anything connects:
	// validation of the binary's own flags.
	Prepare func() error
	// Scheme returns the manager's scheme; nil is client-go's (SchemeWith adds a pillar's API).
	Scheme func() (*runtime.Scheme, error)
	// RESTConfig adjusts the API client configuration (rate limits).
	RESTConfig func(*rest.Config)
	// Cache returns the manager's cache options for the --namespaces list (sorted, nil for all);
	// Main sets DefaultNamespaces from the list when the result leaves it unset.
	Cache func(namespaces []string) cache.Options
	// Client is the manager's client options.
	Client client.Options
	// Setup registers the binary's controllers, webhooks and runnables on mgr.
	Setup func(mgr manager.Manager, rt Runtime) error
}

// WebhookFlags describe a binary's webhook: its flags' defaults, and its server.
type WebhookFlags struct {
	// Optional, when set, is the help of a --webhook flag that turns the webhook on (off by
	// default); without it the webhook always serves.
	Optional string
	// ConfigKind is MutatingWebhookConfiguration or ValidatingWebhookConfiguration; ConfigName,
	// CertSecret and ServiceName the defaults of --webhook-config-name, --cert-secret and
	// --service-name; NamespaceHelp the help of --namespace.
	ConfigKind, ConfigName, CertSecret, ServiceName, NamespaceHelp string
	// NewServer returns the binary's webhook server (one that serves once its certificate is in
	// place); its StartedChecker is the readiness check "webhook".
	NewServer func(webhook.Options) webhook.Server
}

// CertFlags are the values of the webhook certificate flags.
type CertFlags struct {
	CertDir, RotatorCertDir, CertSecret, WebhookConfig, ServiceName, Namespace string
}

// Runtime is what Main hands to Setup.
type Runtime struct {
	// Namespaces are the --namespaces list, sorted; nil watches all.
	Namespaces []string
	// Webhook is true when the webhook serves; Cert its certificate flags.
	Webhook bool
	Cert    CertFlags
}

// Main runs the controller binary o describes and exits: flags, zap logging, the memory limit,
// the manager (authenticated metrics, health and readiness checks, leader election, pprof, cache,
// webhook server), the binary's Setup, and the manager until SIGTERM.
func Main(o Options) {
	if err := NewCommand(o).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// common are the flags every controller binary has.
type common struct {
	metricsAddr, probeAddr, pprofAddr, namespaces string
	leaderElect, metricsSecure, webhook           bool
	webhookHost                                   string
	webhookPort                                   int
	cert                                          CertFlags
}

// NewCommand is Main's command, for tests (its help, its flags).
func NewCommand(o Options) *cobra.Command {
	var (
		c       common
		zapOpts = zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	)
	cmd := &cobra.Command{
		Use:           o.Name,
		Short:         o.Short,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			memlimit.SetFromContainer(ctrl.Log.WithName("setup"))
			if o.GCPercent != 0 {
				ctrl.Log.WithName("setup").Info("Go garbage collector target", "GOGC", SetGCPercent(o.GCPercent, os.Getenv))
			}
			if o.Prepare != nil {
				if err := o.Prepare(); err != nil {
					return err
				}
			}
			return run(o, c)
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.metricsAddr, "metrics-bind-address", ":8443", "address the Prometheus metrics endpoint binds to; 0 disables it")
	f.BoolVar(&c.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS to callers the API server authenticates and authorizes for GET /metrics (ClusterRole kagenti-metrics-reader); false serves plain HTTP to anyone")
	f.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081", "address the /healthz and /readyz endpoints bind to")
	if !o.WebhookOnly {
		f.StringVar(&c.pprofAddr, "pprof-bind-address", "0", "address net/http/pprof binds to, for profiling; 0 disables it")
	}
	f.BoolVar(&c.leaderElect, "leader-elect", false, cmp.Or(o.LeaderElectHelp, "elect a leader so that only one replica reconciles"))
	f.StringVar(&c.namespaces, "namespaces", "", cmp.Or(o.NamespacesHelp, "comma-separated namespaces to watch; empty watches all"))
	if w := o.Webhook; w != nil {
		if w.Optional != "" {
			f.BoolVar(&c.webhook, "webhook", false, w.Optional)
		}
		f.StringVar(&c.webhookHost, "webhook-host", "", "address the webhook server binds to; empty binds all")
		f.IntVar(&c.webhookPort, "webhook-port", 9443, "port of the webhook server")
		f.StringVar(&c.cert.CertDir, "cert-dir", "", "directory with tls.crt and tls.key provided from outside (e.g. cert-manager); disables the built-in certificate rotator")
		f.StringVar(&c.cert.RotatorCertDir, "rotator-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "where the controller writes the rotator's certificate from its Secret (an emptyDir; without --cert-dir)")
		f.StringVar(&c.cert.CertSecret, "cert-secret", w.CertSecret, "Secret (in --namespace) holding the CA and serving certificate managed by the rotator")
		f.StringVar(&c.cert.WebhookConfig, "webhook-config-name", w.ConfigName, w.ConfigKind+" whose caBundle the rotator keeps current")
		f.StringVar(&c.cert.ServiceName, "service-name", w.ServiceName, "Service in front of the webhook (the certificate is issued for <service>.<namespace>.svc)")
		f.StringVar(&c.cert.Namespace, "namespace", EnvOr("POD_NAMESPACE", "kagenti-system"), w.NamespaceHelp)
	}
	if o.Flags != nil {
		o.Flags(f)
	}
	// --kubeconfig comes from controller-runtime's config package, the zap flags from zapOpts.
	zapFlags := flag.NewFlagSet("zap", flag.ExitOnError)
	zapOpts.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	f.AddGoFlagSet(flag.CommandLine)
	cmd.AddCommand(o.Commands...)
	return cmd
}

func run(o Options, c common) error {
	newScheme := o.Scheme
	if newScheme == nil {
		newScheme = SchemeWith()
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	if o.RESTConfig != nil {
		o.RESTConfig(cfg)
	}
	rt := Runtime{Namespaces: NamespaceList(c.namespaces), Cert: c.cert}
	var cacheOpts cache.Options
	if o.Cache != nil {
		cacheOpts = o.Cache(rt.Namespaces)
	}
	if cacheOpts.DefaultNamespaces == nil {
		cacheOpts.DefaultNamespaces = NamespaceConfigs(rt.Namespaces)
	}
	opts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsauth.ServerOptions(c.metricsAddr, c.metricsSecure),
		HealthProbeBindAddress: c.probeAddr,
		PprofBindAddress:       c.pprofAddr,
		Cache:                  cacheOpts,
		Client:                 o.Client,
	}
	if !o.WebhookOnly {
		opts.LeaderElection = c.leaderElect
		opts.LeaderElectionID = o.Name + ".kagenti.io"
		opts.LeaderElectionReleaseOnCancel = true
	}
	var srv webhook.Server
	if w := o.Webhook; w != nil {
		rt.Webhook = w.Optional == "" || c.webhook
		certDir := cmp.Or(c.cert.CertDir, c.cert.RotatorCertDir)
		srv = w.NewServer(webhook.Options{Host: c.webhookHost, Port: c.webhookPort, CertDir: certDir})
		opts.WebhookServer = srv
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	if err := o.Setup(mgr, rt); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if !o.WebhookOnly {
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return err
		}
	}
	if rt.Webhook {
		// Ready only once the webhook serves TLS, i.e. once its certificate is loaded.
		if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
			return err
		}
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// SchemeWith returns a scheme constructor of client-go's types and adds'.
func SchemeWith(adds ...func(*runtime.Scheme) error) func() (*runtime.Scheme, error) {
	return func() (*runtime.Scheme, error) {
		s := runtime.NewScheme()
		for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, adds...) {
			if err := add(s); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
}

// NamespaceList turns "a, b,a" into the sorted namespaces it names; nil (all namespaces) for none.
func NamespaceList(list string) []string {
	var out []string
	for _, ns := range strings.Split(list, ",") {
		if ns = strings.TrimSpace(ns); ns != "" && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// NamespaceConfigs is the cache's per-namespace configuration of namespaces; nil watches all.
func NamespaceConfigs(namespaces []string) map[string]cache.Config {
	if len(namespaces) == 0 {
		return nil
	}
	out := make(map[string]cache.Config, len(namespaces))
	for _, ns := range namespaces {
		out[ns] = cache.Config{}
	}
	return out
}

// EnvOr is the environment variable key, or def when it is unset or empty.
func EnvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
