package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idpclient"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// Status ports of the roles (sidecar.*StatusPort: the tokenexchange controller reads them too).
const (
	registerAdminPort      = sidecar.RegisterStatusPort
	inboundAdminPort       = sidecar.InboundStatusPort
	outboundAdminPort      = sidecar.OutboundStatusPort
	spiffeHelperHealthPort = sidecar.SpiffeHelperHealthPort
	// sidecarStatusPort is the aggregate status server of `sidecar`, the roles of one container.
	sidecarStatusPort = contract.StatusPortAuthbridge
)

type commonFlags struct {
	configDir   string
	identityDir string
	sharedDir   string
	traceDir    string
	poll        time.Duration
	logLevel    string

	// tracing is the process's span export, shared by its roles; set by startTracing.
	tracing *tracing.Tracing
}

func (c *commonFlags) register(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&c.configDir, "config-dir", envOr("KAGENTI_CONFIG_DIR", defaultConfigDir()),
		"directory of the ConfigMap {workload}-token-exchange's config.yaml (may be missing): the identity directory, where the injector projects it, or "+
			authconfig.LegacyConfigDir+" in pods of injections v1 to v3 [$KAGENTI_CONFIG_DIR]")
	f.StringVar(&c.identityDir, "identity-dir", envOr("KAGENTI_IDENTITY_DIR", authconfig.IdentityDir),
		"directory of the injector's identity defaults (defaults.env, POD_NAMESPACE, POD_NAME when the hostname is not the pod's name; may be missing); the environment wins over it [$KAGENTI_IDENTITY_DIR]")
	f.StringVar(&c.sharedDir, "shared-dir", envOr("KAGENTI_SHARED_DIR", authconfig.SharedDir),
		"the volume the identity containers share (SVID, client credentials) [$KAGENTI_SHARED_DIR]")
	f.StringVar(&c.traceDir, "trace-dir", envOr("KAGENTI_TRACE_DIR", contract.PathTrace),
		"directory of the ConfigMap {workload}-trace that kagenti-agenttrace writes (may be missing: no spans are exported then); the inbound and outbound roles export their spans where it points [$KAGENTI_TRACE_DIR]")
	f.DurationVar(&c.poll, "poll-interval", 10*time.Second, "how often files are re-read besides change notifications")
	f.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
}

// logger is the process's logger for one role: every line names it.
func (c *commonFlags) logger(role string) (*zap.Logger, error) {
	log, err := c.baseLogger()
	if err != nil {
		return nil, err
	}
	return log.With(zap.String("role", role)), nil
}

// baseLogger is the process's logger, naming no role.
func (c *commonFlags) baseLogger() (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(c.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return logConfig(lvl).Build()
}

// logConfig is zap's production configuration without its stack traces on errors: the errors this
// binary logs are conditions of its surroundings (an IdP that refuses, a configuration rejected),
// logged again on every retry, where a Go stack trace says nothing and buries the message. A panic
// still prints its stack.
func logConfig(lvl zapcore.Level) zap.Config {
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.Sampling = nil
	cfg.DisableStacktrace = true
	return cfg
}

// config loads the role's configuration (defaults from the environment, config.yaml over them).
func (c *commonFlags) config(log *zap.Logger) (*sidecar.Config, error) {
	src, err := sidecar.SourceFromEnv(c.configDir, c.identityDir)
	if err != nil {
		return nil, err
	}
	return sidecar.NewConfig(src, log)
}

// withConfig runs fn with the role's logger and its configuration (config), and flushes the
// logger when fn returns.
func (c *commonFlags) withConfig(role string, fn func(*zap.Logger, *sidecar.Config) error) error {
	log, err := c.logger(role)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	cfg, err := c.config(log)
	if err != nil {
		return err
	}
	return fn(log, cfg)
}

// idpClient is the HTTP client for the identity provider (JWKS, token, registration): bounded
// time, the environment's HTTP proxy settings honoured, redirects never followed (idpclient).
func idpClient() *http.Client { return idpclient.New() }

// role is one long-running role built on a configuration: what its status server reports and the
// tasks that do its work.
type role struct {
	name       string
	statusAddr string
	readiness  sidecar.Readiness
	// refusal reports what the role refuses to do until someone acts; nil for roles that never refuse.
	refusal  sidecar.Refusals
	liveness sidecar.Liveness // nil: alive while the process runs
	tasks    []func(context.Context) error
}

// prepareRole builds a role on a loaded configuration (each role's options implement it).
type prepareRole func(common *commonFlags, cfg *sidecar.Config, client *http.Client, log *zap.Logger) (*role, error)

// runSingleRole is a role's own subcommand: it loads the configuration, builds the role and runs
// it with the configuration watch until ctx ends or one of its parts fails.
func runSingleRole(ctx context.Context, common *commonFlags, name string, prepare prepareRole) error {
	return common.withConfig(name, func(log *zap.Logger, cfg *sidecar.Config) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		g, ctx := errgroup.WithContext(ctx)
		common.startTracing(ctx, g, []string{name}, log)
		r, err := prepare(common, cfg, idpClient(), log)
		if err != nil {
			cancel()
			_ = g.Wait()
			return err
		}
		g.Go(func() error { cfg.Run(ctx, common.poll); return nil })
		g.Go(func() error { return serveRole(ctx, r, cfg, log) })
		return g.Wait()
	})
}

// roleOptions are a long-running role's own flags and how the role is built on a configuration
// (registerOptions, inboundOptions, outboundOptions): its own subcommand and `sidecar` share them.
type roleOptions interface {
	addFlags(f *pflag.FlagSet, statusFlag string)
	prepare(common *commonFlags, cfg *sidecar.Config, client *http.Client, log *zap.Logger) (*role, error)
}

// newRoleCommand is a role's own subcommand (runSingleRole), its status server on --status-address.
func newRoleCommand(common *commonFlags, name, short, long string, opts roleOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSingleRole(cmd.Context(), common, name, opts.prepare)
		},
	}
	opts.addFlags(cmd.Flags(), "status-address")
	return cmd
}

// startTracing follows the trace files when one of roles emits spans (inbound, outbound), until
// ctx ends; then the last spans are flushed (within tracing.ShutdownTimeout).
func (c *commonFlags) startTracing(ctx context.Context, g *errgroup.Group, roles []string, log *zap.Logger) {
	if !slices.Contains(roles, "inbound") && !slices.Contains(roles, "outbound") {
		return
	}
	tlog := log.With(zap.String("traceDir", c.traceDir))
	tracing.ReportErrorsTo(tlog)
	c.tracing = tracing.New(c.traceDir, tlog)
	c.tracing.Reload() // the roles' first requests are traced when the files are there
	g.Go(func() error { c.tracing.Watch(ctx, c.poll); return nil })
}

// errTaskEnded is a role's task that returned before the role was stopped.
var errTaskEnded = errors.New("a task ended on its own")

// serveRole runs a built role: its status server and its tasks, until ctx ends (nil) or one of
// them fails or ends (that error). The configuration watch is the caller's: roles in one process share it.
func serveRole(ctx context.Context, r *role, cfg *sidecar.Config, log *zap.Logger) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := sidecar.Serve(ctx, r.statusAddr, sidecar.AdminHandler(r.name, cfg, r.readiness, r.refusal, r.liveness), log); err != nil {
			return fmt.Errorf("status server on %s: %w", r.statusAddr, err)
		}
		return nil
	})
	for _, t := range r.tasks {
		g.Go(func() error {
			err := t(ctx)
			if err == nil && ctx.Err() == nil {
				// Every task runs until ctx ends: one that returns earlier left the role half working.
				err = errTaskEnded
			}
			return err
		})
	}
	log.Info("started", zap.String("version", version), zap.String("status", r.statusAddr))
	err := g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("stopped")
	return nil
}

// defaultConfigDir is where the injector put the ConfigMap in this pod: authconfig.ConfigDir (the
// identity volume, injection v4), or authconfig.LegacyConfigDir when that directory exists (a pod
// of injections v1 to v3 running this binary, e.g. through an image tag that moved).
func defaultConfigDir() string {
	if info, err := os.Stat(authconfig.LegacyConfigDir); err == nil && info.IsDir() {
		return authconfig.LegacyConfigDir
	}
	return authconfig.ConfigDir
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func envSummary() string {
	return strings.Join(authconfig.EnvNames(), ", ")
}

func adminAddress(port int) string { return net.JoinHostPort("", fmt.Sprint(port)) }
