package outbound

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/inbound"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/svidtest"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// calleeSidecar is the real inbound proxy (token validation off, to measure the transport alone)
// in front of an agent, served in plain HTTP (mode off) or behind the mTLS listener.
func calleeSidecar(b *testing.B, mode string, ca *svidtest.CA) netip.AddrPort {
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	b.Cleanup(agent.Close)
	_, port, _ := net.SplitHostPort(agent.Listener.Addr().String())
	target, _ := strconv.Atoi(port)
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, authconfig.ConfigFile), []byte("inbound: {validation: {enabled: false}}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	p := func(i int32) *int32 { return &i }
	uid := int64(1337)
	cfg, err := sidecar.NewConfig(sidecar.Source{Dir: dir,
		Workload: authconfig.Workload{Namespace: "agents", Name: "callee", ServiceAccount: "callee"},
		Defaults: authconfig.Spec{
			Spiffe:             &authconfig.SpiffeSpec{TrustDomain: "cluster.local", SocketPath: "/run/spire/agent-sockets/agent.sock", Audience: "kagenti-agents"},
			ClientRegistration: &authconfig.ClientRegistrationSpec{Keycloak: &authconfig.KeycloakSpec{URL: "http://idp.example", Realm: "agents", ClientNameTemplate: "{{.Namespace}}/{{.WorkloadName}}"}},
			Inbound:            &authconfig.InboundSpec{Port: p(8080), TargetPort: p(int32(target))},
			Outbound: &authconfig.OutboundSpec{
				TrafficInterception: &authconfig.TrafficInterceptionSpec{ProxyPort: p(15123), ProxyUID: &uid},
				TokenExchange:       &authconfig.TokenExchangeSpec{DefaultTarget: &authconfig.ExchangeTarget{Audience: "downstream"}},
			},
		}}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := netip.MustParseAddrPort(ln.Addr().String())
	if mode != authconfig.MTLSOff {
		ln = inbound.MTLSListener(ln, mode, svidtest.NewSource(ca.SVID(b, calleeSVID), ca), ca.TD, zap.NewNop())
	}
	srv := &http.Server{Handler: inbound.New(cfg, http.DefaultClient, zap.NewNop()), Protocols: inbound.ServerProtocols(), ConnContext: inbound.ConnContext}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return addr
}

// BenchmarkMTLSOverhead: a plain-HTTP client → the caller's outbound proxy → the callee's
// inbound proxy → the agent, with the hop between the sidecars in plain HTTP or mTLS (ECDSA P-256
// SVIDs, TLS 1.3), on a kept-alive connection between the sidecars and on a new one per request
// (where the handshake is paid). The mTLS cost is each mtls case minus its plain twin.
func BenchmarkMTLSOverhead(b *testing.B) {
	for _, reuse := range []bool{true, false} {
		for _, mode := range []string{authconfig.MTLSOff, authconfig.MTLSStrict} {
			name := fmt.Sprintf("%s/keepalive=%v", map[string]string{authconfig.MTLSOff: "plain", authconfig.MTLSStrict: "mtls"}[mode], reuse)
			b.Run(name, func(b *testing.B) {
				ca := svidtest.NewCA(b, "cluster.local")
				dst := calleeSidecar(b, mode, ca)
				f := newFixture(b, "")
				if mode != authconfig.MTLSOff {
					f.proxy.OriginateMTLS(mode, svidtest.NewSource(ca.SVID(b, callerSVID), ca), ca.TD)
				}
				for _, rt := range upstreamTransports(f.proxy) {
					rt.DisableKeepAlives = !reuse
				}
				f.dst.Store(&dst)
				latencies(b, keepAlive(), func(int) string { return "http://" + f.addr + "/" },
					func(int) string { return "callee:8080" }, func(int) string { return "user-token" })
			})
		}
	}
}

// upstreamTransports are the proxy's HTTP/1.1 transports to destinations.
func upstreamTransports(p *Proxy) []*http.Transport {
	switch t := p.rp.Transport.(type) {
	case *mtlsTransport:
		return []*http.Transport{t.plain.h1.(*http.Transport), t.secure.h1.(*http.Transport)}
	case protocolTransport:
		return []*http.Transport{t.h1.(*http.Transport)}
	}
	return nil
}
