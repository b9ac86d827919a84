package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/outbound"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
)

func newOutboundCommand(common *commonFlags) *cobra.Command {
	var (
		adminAddr string
		detection time.Duration
	)
	cmd := &cobra.Command{
		Use:   "outbound",
		Short: "outbound proxy (envoy-proxy): exchange the caller's token on outgoing requests",
		Long: `outbound accepts the outgoing TCP connections proxy-init redirects to it, on loopback only
(127.0.0.1 and ::1, port outbound.trafficInterception.proxyPort), and sends each to its original
destination (SO_ORIGINAL_DST). HTTP/1.1 and h2c requests are matched against the destination rules
by their Host (first match wins; a rule with a port matches that port only): a pass-through rule
forwards the request as it is; a rule with a target, or the default target when no rule matches,
exchanges the request's bearer token (RFC 8693) at the token endpoint for one with the target's
audience and scopes, authenticating with the registered client's credentials (or the JWT SVID
when registration is off). Exchanged tokens are cached until shortly before they expire. A failed
exchange is answered 502 (provider unreachable or failing) or 403 (the provider refused the
caller's token). TLS and other non-HTTP traffic is tunnelled untouched.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := common.logger("outbound")
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			cfg, err := common.config(log)
			if err != nil {
				return err
			}
			creds := outbound.NewCredentialSource(common.sharedDir)
			p := outbound.New(cfg, creds, outbound.NewExchanger(idpClient()), log)
			p.DetectionTimeout = detection
			port := cfg.Current().Config.Outbound.Interception.ProxyPort
			var listeners []net.Listener
			for _, host := range []string{"127.0.0.1", "::1"} {
				ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
				if err != nil {
					if host == "::1" && errors.Is(err, syscall.EADDRNOTAVAIL) {
						continue // no IPv6 in this pod
					}
					return err
				}
				listeners = append(listeners, ln)
			}
			tasks := []func(context.Context) error{func(ctx context.Context) error {
				sidecar.WatchDir(ctx, common.sharedDir, common.poll, log, creds.Refresh)
				return nil
			}}
			for _, ln := range listeners {
				log.Info("proxying", zap.Stringer("listen", ln.Addr()))
				tasks = append(tasks, func(ctx context.Context) error { return p.Serve(ctx, ln) })
			}
			return runRole(cmd.Context(), "outbound", adminAddr, cfg, common.poll, p.Ready, log, tasks...)
		},
	}
	cmd.Flags().StringVar(&adminAddr, "status-address", adminAddress(outboundAdminPort), "address of /healthz, /readyz and /status")
	cmd.Flags().DurationVar(&detection, "protocol-detection-timeout", 5*time.Second,
		"how long to wait for a client's first bytes before tunnelling the connection as a server-first protocol (exclude such ports instead)")
	return cmd
}
