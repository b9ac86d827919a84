package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/inbound"
)

func newInboundCommand(common *commonFlags) *cobra.Command {
	var adminAddr string
	cmd := &cobra.Command{
		Use:   "inbound",
		Short: "auth-proxy: admit requests to the agent only with a valid bearer token",
		Long: `inbound listens on inbound.port (all interfaces) and forwards to the agent on
127.0.0.1:inbound.targetPort, over HTTP/1.1 or h2c as the client speaks. A request needs an
"Authorization: Bearer" JWT signed by a key of the identity provider's JWKS, from the expected
issuer, not expired, with the workload's SPIFFE ID (or inbound.validation.audience) among its
audiences and every required scope; otherwise it is answered 401 (403 for missing scopes) with a
WWW-Authenticate header that says why. /.well-known/* and /healthz, /readyz, /livez, /health pass
without a token. The agent receives the token's claims in X-Kagenti-Claims (the JWT payload,
base64url).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := common.logger("inbound")
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			cfg, err := common.config(log)
			if err != nil {
				return err
			}
			p := inbound.New(cfg, idpClient(), log)
			addr := net.JoinHostPort("", fmt.Sprint(cfg.Current().Config.Inbound.Port))
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			serve := func(ctx context.Context) error {
				srv := &http.Server{Handler: p, Protocols: inbound.ServerProtocols(), ReadHeaderTimeout: 30 * time.Second,
					IdleTimeout: 5 * time.Minute, ErrorLog: zap.NewStdLog(log)}
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
			return runRole(cmd.Context(), "inbound", adminAddr, cfg, common.poll, p.Ready, log, serve, keys)
		},
	}
	cmd.Flags().StringVar(&adminAddr, "status-address", adminAddress(inboundAdminPort), "address of /healthz, /readyz and /status")
	return cmd
}
