package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/outbound"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
)

const outboundLong = `outbound accepts the outgoing TCP connections proxy-init redirects to it, on loopback only
(127.0.0.1 and ::1, port outbound.trafficInterception.proxyPort), and sends each to its original
destination (SO_ORIGINAL_DST). HTTP/1.1 and h2c requests are matched against the destination rules
by their Host (first match wins; a rule with a port matches that port only): a pass-through rule
forwards the request as it is; a rule with a target, or the default target when no rule matches,
exchanges the request's bearer token (RFC 8693) at the token endpoint for one with the target's
audience and scopes, authenticating with the registered client's credentials (or the JWT SVID
when registration is off). Exchanged tokens are cached until shortly before they expire. A failed
exchange is answered 502 (provider unreachable or failing) or 403 (the provider refused the
caller's token). TLS and other non-HTTP traffic is tunnelled untouched.`

// outboundOptions are the outbound role's own flags.
type outboundOptions struct {
	statusAddr string
	detection  time.Duration
}

func (o *outboundOptions) addFlags(f *pflag.FlagSet, statusFlag string) {
	f.StringVar(&o.statusAddr, statusFlag, adminAddress(outboundAdminPort), "address of the outbound role's /healthz, /readyz and /status")
	f.DurationVar(&o.detection, "protocol-detection-timeout", 5*time.Second,
		"how long to wait for a client's first bytes before tunnelling the connection as a server-first protocol (exclude such ports instead)")
}

// prepare builds the outbound role on cfg and opens its loopback listeners.
func (o *outboundOptions) prepare(common *commonFlags, cfg *sidecar.Config, client *http.Client, log *zap.Logger) (*role, error) {
	creds := outbound.NewCredentialSource(common.sharedDir)
	exchanger := outbound.NewExchanger(client)
	exchanger.Tracing = common.tracing
	p := outbound.New(cfg, creds, exchanger, log)
	p.Tracing = common.tracing
	p.DetectionTimeout = o.detection
	p.Loops = sidecar.NewLoops()
	if c := cfg.Current().Config; c.MTLS.On() {
		src, td, err := svidSource(c)
		if err != nil {
			return nil, err
		}
		p.OriginateMTLS(c.MTLS.Mode, src, td)
		log.Info("mutual TLS to kagenti sidecars", zap.String("mode", c.MTLS.Mode), zap.String("trustDomain", td.Name()))
	}
	port := cfg.Current().Config.Outbound.Interception.ProxyPort
	var listeners []net.Listener
	for _, host := range []string{"127.0.0.1", "::1"} {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
		if err != nil {
			if host == "::1" && errors.Is(err, syscall.EADDRNOTAVAIL) {
				continue // no IPv6 in this pod
			}
			for _, l := range listeners {
				_ = l.Close()
			}
			return nil, err
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
	return &role{name: "outbound", statusAddr: o.statusAddr, readiness: p.Ready, liveness: p.Loops.Check, tasks: tasks}, nil
}

func newOutboundCommand(common *commonFlags) *cobra.Command {
	return newRoleCommand(common, "outbound", "outbound proxy (envoy-proxy): exchange the caller's token on outgoing requests", outboundLong, &outboundOptions{})
}
