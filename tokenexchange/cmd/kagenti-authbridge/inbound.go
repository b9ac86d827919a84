package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/inbound"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
)

const inboundLong = `inbound listens on inbound.port (all interfaces) and forwards to the agent on
127.0.0.1:inbound.targetPort, over HTTP/1.1 or h2c as the client speaks. A request needs an
"Authorization: Bearer" JWT signed by a key of the identity provider's JWKS, from the expected
issuer, not expired, with the workload's SPIFFE ID (or inbound.validation.audience) among its
audiences and every required scope; otherwise it is answered 401 (403 for missing scopes) with a
WWW-Authenticate header that says why. /.well-known/* and /healthz, /readyz, /livez, /health pass
without a token. The agent receives the token's claims in X-Kagenti-Claims (the JWT payload,
base64url).`

// inboundOptions are the inbound role's own flags.
type inboundOptions struct {
	statusAddr string
}

func (o *inboundOptions) addFlags(f *pflag.FlagSet, statusFlag string) {
	f.StringVar(&o.statusAddr, statusFlag, adminAddress(inboundAdminPort), "address of the inbound role's /healthz, /readyz and /status")
}

// prepare builds the inbound role on cfg and opens its listener.
func (o *inboundOptions) prepare(common *commonFlags, cfg *sidecar.Config, client *http.Client, log *zap.Logger) (*role, error) {
	p := inbound.New(cfg, client, log)
	p.Tracing = common.tracing
	addr := net.JoinHostPort("", fmt.Sprint(cfg.Current().Config.Inbound.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	loops := sidecar.NewLoops()
	ln = loops.Listener("inbound proxy on "+addr, ln)
	if c := cfg.Current().Config; c.MTLS.On() {
		src, td, err := svidSource(c)
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
		ln = inbound.MTLSListener(ln, c.MTLS.Mode, src, td, log)
		log.Info("mutual TLS", zap.String("mode", c.MTLS.Mode), zap.String("trustDomain", td.Name()))
	}
	serve := func(ctx context.Context) error {
		srv := &http.Server{Handler: p, Protocols: inbound.ServerProtocols(), ReadHeaderTimeout: 30 * time.Second,
			IdleTimeout: 5 * time.Minute, ErrorLog: zap.NewStdLog(log), ConnContext: inbound.ConnContext}
		go func() {
			<-ctx.Done()
			shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
		}()
		log.Info("proxying", zap.String("listen", addr), zap.Int32("agentPort", cfg.Current().Config.Inbound.TargetPort))
		if err := srv.Serve(ln); err != http.ErrServerClosed {
			return err
		}
		return nil
	}
	keys := func(ctx context.Context) error { p.Run(ctx); return nil }
	return &role{name: "inbound", statusAddr: o.statusAddr, readiness: p.Ready, liveness: loops.Check, tasks: []func(context.Context) error{serve, keys}}, nil
}

func newInboundCommand(common *commonFlags) *cobra.Command {
	return newRoleCommand(common, "inbound", "auth-proxy: admit requests to the agent only with a valid bearer token", inboundLong, &inboundOptions{})
}
