package outbound

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/telemetry"
)

// denyAllBut is a default-deny egress policy with the given allow rules (YAML flow sequence
// items), and the exchange of the fixture's rules.
func denyAllBut(allow string, extra ...string) string {
	return rules + "  egress:\n    default: Deny\n    allow: [" + allow + "]\n" + strings.Join(extra, "")
}

// lineEchoServer accepts TCP connections and echoes each line; accepted counts them.
func lineEchoServer(t *testing.T, address string) (netip.AddrPort, *atomic.Int32) {
	ln, err := net.Listen("tcp", address)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String()), &accepted
}

// dial opens a connection through the proxy as if the client connected to dst.
func (f *fixture) dial(dst netip.AddrPort) net.Conn {
	f.t.Helper()
	f.dst.Store(&dst)
	c, err := net.Dial("tcp", f.addr)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { c.Close() })
	return c
}

// echo writes a line and reads it back; false when the connection was closed instead.
func echo(t *testing.T, c net.Conn, line string) bool {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	if _, err := fmt.Fprintln(c, line); err != nil {
		return false
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return false
	}
	assert.Equal(t, line+"\n", got)
	return true
}

// egressDenial reads the 403 of a denied request.
func egressDenial(t *testing.T, status int, header http.Header, body string) map[string]string {
	t.Helper()
	require.Equal(t, http.StatusForbidden, status, body)
	var out map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &out), body)
	assert.Equal(t, ErrEgressDenied, out["error"])
	assert.Equal(t, out["destination"], header.Get(EgressDeniedHeader), "the header names the denied destination")
	return out
}

func (f *fixture) get(dst netip.AddrPort, host string) (int, http.Header, string) {
	f.t.Helper()
	f.dst.Store(&dst)
	req, err := http.NewRequest(http.MethodGet, "http://"+f.addr+"/path", nil)
	require.NoError(f.t, err)
	req.Host = host
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// auditRecords returns the egress audit records logged so far, as field maps.
func (f *fixture) auditRecords(message string) []map[string]any {
	var out []map[string]any
	for _, e := range f.logs.FilterMessage(message).All() {
		out = append(out, e.ContextMap())
	}
	return out
}

// Transparent HTTP under default Deny: a host rule allows the name the request's Host gives when
// it resolves to the destination, on the rule's ports; everything else gets a 403 naming the
// destination, before any exchange, with one audit record.
func TestEgressHostRuleAllowsHTTPToTheNamedHostOnly(t *testing.T) {
	up := callee(t)
	f := newFixture(t, denyAllBut(fmt.Sprintf(`{host: api.example.com}, {host: "*.tools.svc.cluster.local", ports: [%d]}, {host: svc.example.com, ports: [1]}`, up.Port())))

	status, _, body := f.get(up, "api.example.com")
	assert.Equal(t, http.StatusOK, status, body)
	status, _, body = f.get(up, "weather.tools.svc.cluster.local")
	assert.Equal(t, http.StatusOK, status, body)

	status, h, body := f.get(up, "svc.example.com") // its rule's port is not the destination's
	d := egressDenial(t, status, h, body)
	assert.Equal(t, fmt.Sprintf("svc.example.com:%d", up.Port()), d["destination"])
	assert.Equal(t, "default", d["rule"])

	status, h, body = f.get(up, "elsewhere.example.org")
	egressDenial(t, status, h, body)
	assert.Len(t, f.idp.Calls(), 0, "a denied request is not exchanged (nor are requests without a token)")

	recs := f.auditRecords("egress denied")
	require.Len(t, recs, 2)
	assert.Equal(t, map[string]any{
		"caller": "spiffe://cluster.local/ns/agents/sa/caller", "workload": "agents/caller",
		"destination": fmt.Sprintf("elsewhere.example.org:%d", up.Port()), "address": up.String(), "protocol": "http",
		"method": "GET", "path": "/path", "rule": "default", "result": "deny", "dryRun": false,
		"reason": fmt.Sprintf("no egress rule allows elsewhere.example.org:%d (%s)", up.Port(), up),
	}, recs[1])
}

// TestEgressForgedHostIsDenied: a Host naming an allowed host on a connection to another address
// is no name at all: denied, and the destination never sees the request.
func TestEgressForgedHostIsDenied(t *testing.T) {
	var reached atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	elsewhere := netip.MustParseAddrPort(ln.Addr().String())

	f := newFixture(t, denyAllBut(`{host: api.example.com}`)) // api.example.com resolves to 127.0.0.1
	status, h, body := f.get(elsewhere, "api.example.com")
	d := egressDenial(t, status, h, body)
	assert.Contains(t, d["reason"], "names no host that resolves to it")
	assert.Zero(t, reached.Load())
}

// An agent rule allows the agent's Service names (in the workload's namespace when it names
// none), a cidr rule an address whatever the Host says.
func TestEgressAgentAndCIDRRules(t *testing.T) {
	up := callee(t)
	f := newFixture(t, denyAllBut(`{agent: {name: weather}}, {agent: {name: search, namespace: tools}}`))
	for _, name := range []string{"weather", "weather.agents", "weather.agents.svc", "weather.agents.svc.cluster.local",
		"search.tools.svc.cluster.local", "weather.other.svc.cluster.local", "search.agents.svc.cluster.local"} {
		f.dns.set(name, "127.0.0.1")
	}
	for _, host := range []string{"weather", "weather.agents", "weather.agents.svc", "weather.agents.svc.cluster.local", "search.tools.svc.cluster.local"} {
		status, _, body := f.get(up, host)
		assert.Equal(t, http.StatusOK, status, "%s: %s", host, body)
	}
	for _, host := range []string{"weather.other.svc.cluster.local", "search.agents.svc.cluster.local", "127.0.0.1"} {
		status, h, body := f.get(up, host)
		egressDenial(t, status, h, body)
	}

	f = newFixture(t, denyAllBut(`{cidr: 127.0.0.0/8}`))
	status, _, body := f.get(up, "anything.example")
	assert.Equal(t, http.StatusOK, status, body)
}

// Raw TCP has no name: only a cidr rule allows it; denied, the connection is closed and the
// destination is never connected to.
func TestEgressRawTCPOnlyByCIDR(t *testing.T) {
	dst, accepted := lineEchoServer(t, "127.0.0.1:0")
	f := newFixture(t, denyAllBut(`{host: "*"}`))
	assert.False(t, echo(t, f.dial(dst), "hello"), "denied: closed")
	assert.Zero(t, accepted.Load(), "never connected")
	recs := f.auditRecords("egress denied")
	require.Len(t, recs, 1)
	assert.Equal(t, "tcp", recs[0]["protocol"])

	f = newFixture(t, denyAllBut(fmt.Sprintf(`{cidr: 127.0.0.1/32, ports: [%d]}`, dst.Port())))
	assert.True(t, echo(t, f.dial(dst), "hello"), "allowed by cidr")
}

// A client that stays silent (a server-first protocol) to an address no cidr rule allows is
// closed without the destination being connected to.
func TestEgressSilentClientIsDeniedWithoutConnecting(t *testing.T) {
	dst, accepted := lineEchoServer(t, "127.0.0.1:0")
	f := newFixture(t, denyAllBut(`{host: api.example.com}`))
	c := f.dial(dst)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "closed")
	assert.Zero(t, accepted.Load())
	recs := f.auditRecords("egress denied")
	require.Len(t, recs, 1)
	assert.Contains(t, recs[0]["reason"], "the client sent nothing")
}

// tlsCallee is a TLS server; reached counts the requests that got through.
func tlsCallee(t *testing.T) (netip.AddrPort, *atomic.Int32) {
	var reached atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String()), &reached
}

// handshake runs a TLS handshake through the proxy to dst with server name sni ("" sends none).
func (f *fixture) handshake(dst netip.AddrPort, sni string) error {
	c := f.dial(dst)
	require.NoError(f.t, c.SetDeadline(time.Now().Add(10*time.Second)))
	return tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake() //nolint:gosec // a test server's certificate
}

// Transparent TLS: the ClientHello's SNI, when it resolves to the destination, is the name host
// rules match; a denied handshake gets an access_denied alert; without SNI only cidr rules match.
func TestEgressTLSBySNI(t *testing.T) {
	dst, _ := tlsCallee(t)
	f := newFixture(t, denyAllBut(`{host: api.example.com}`))
	require.NoError(t, f.handshake(dst, "api.example.com"), "allowed by SNI; the ClientHello reached the server unchanged")

	err := f.handshake(dst, "elsewhere.googleapis.com") // resolves to 192.0.2.1: not this destination
	require.Error(t, err)
	assert.Contains(t, err.Error(), "access denied")
	err = f.handshake(dst, "elsewhere.example.org")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "access denied")
	err = f.handshake(dst, "") // no SNI
	require.Error(t, err)
	recs := f.auditRecords("egress denied")
	require.Len(t, recs, 3)
	assert.Equal(t, "tls", recs[0]["protocol"])
	assert.Equal(t, dst.String(), recs[0]["destination"], "a name that does not resolve to the destination is not reported as it")
	assert.Equal(t, fmt.Sprintf("elsewhere.example.org:%d", dst.Port()), recs[1]["destination"])

	f = newFixture(t, denyAllBut(`{cidr: 127.0.0.0/8}`))
	require.NoError(t, f.handshake(dst, ""), "no SNI: allowed by cidr")
}

// Proxy mode: the absolute-form request's host and the CONNECT authority, resolved, decide.
func TestEgressProxyMode(t *testing.T) {
	up := callee(t)
	tlsUp, _ := tlsCallee(t)
	f := newFixture(t, denyAllBut(`{host: api.example.com}, {host: svc.example.com}`))
	f.dst.Store(nil) // connections to the proxy itself: proxy mode
	proxyURL, _ := url.Parse("http://" + f.addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a test server's certificate

	resp, err := client.Get(fmt.Sprintf("http://api.example.com:%d/x", up.Port()))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	resp, err = client.Get(fmt.Sprintf("http://elsewhere.example.org:%d/x", up.Port()))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	egressDenial(t, resp.StatusCode, resp.Header, string(b))

	// (api.example.com's destination rule exchanges: CONNECT to it is refused whatever the policy.)
	resp, err = client.Get(fmt.Sprintf("https://svc.example.com:%d/x", tlsUp.Port()))
	require.NoError(t, err, "CONNECT to an allowed host")
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	_, err = client.Get(fmt.Sprintf("https://elsewhere.example.org:%d/x", tlsUp.Port()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Forbidden", "CONNECT refused with 403")
	recs := f.auditRecords("egress denied")
	require.Len(t, recs, 2)
	assert.Equal(t, "connect", recs[1]["protocol"])
}

// dryRun: what would be denied flows, and is audited as such.
func TestEgressDryRunAuditsAndAllows(t *testing.T) {
	up := callee(t)
	dst, accepted := lineEchoServer(t, "127.0.0.1:0")
	f := newFixture(t, denyAllBut(`{host: api.example.com}`, "    dryRun: true\n"))
	status, _, body := f.get(up, "elsewhere.example.org")
	assert.Equal(t, http.StatusOK, status, body)
	assert.True(t, echo(t, f.dial(dst), "hello"))
	assert.EqualValues(t, 1, accepted.Load())
	assert.Empty(t, f.auditRecords("egress denied"))
	recs := f.auditRecords("egress would be denied")
	require.Len(t, recs, 2)
	for _, r := range recs {
		assert.Equal(t, true, r["dryRun"])
		assert.Equal(t, "deny", r["result"])
	}
}

// A reload applies to new connections and to the next request of a kept-alive HTTP connection; a
// tunnel allowed when it opened stays open.
func TestEgressReloadKeepsEstablishedTunnels(t *testing.T) {
	dst, _ := lineEchoServer(t, "127.0.0.1:0")
	up := callee(t)
	f := newFixture(t, denyAllBut(`{cidr: 127.0.0.0/8}`))
	open := f.dial(dst)
	require.True(t, echo(t, open, "before"))

	f.dst.Store(&up)
	keepAlive := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(keepAlive.CloseIdleConnections)
	getKeptAlive := func() int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+f.addr+"/", nil)
		req.Host = "elsewhere.example.org"
		resp, err := keepAlive.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, getKeptAlive())

	writeConfig(t, f.dir, denyAllBut(`{host: api.example.com}`))
	f.cfg.Reload()
	require.NoError(t, f.cfg.Err())

	assert.Equal(t, http.StatusForbidden, getKeptAlive(), "the next request on the kept-alive connection")
	assert.False(t, echo(t, f.dial(dst), "new"), "a new tunnel is denied")
	assert.True(t, echo(t, open, "after"), "the established tunnel stays open")
}

// The default (no egress section, or default Allow) lets everything through, as before the policy
// existed.
func TestEgressDefaultAllowsEverything(t *testing.T) {
	dst, _ := lineEchoServer(t, "127.0.0.1:0")
	f := newFixture(t, rules+"  egress: {allow: [{host: api.example.com}]}\n")
	status, _, body := f.get(callee(t), "elsewhere.example.org")
	assert.Equal(t, http.StatusOK, status, body)
	assert.True(t, echo(t, f.dial(dst), "hello"))
}

// TCP to a name server of the pod's resolv.conf on port 53 is always allowed (DNS over TCP); the
// same address on another port is not.
func TestEgressAllowsThePodsNameServer(t *testing.T) {
	pol := compileEgress(newFixture(t, denyAllBut("")).cfg.Current().Config, []netip.Addr{netip.MustParseAddr("10.96.0.10")})
	assert.Equal(t, egressDecision{allowed: true, rule: egressRuleDNS}, pol.decide("", netip.MustParseAddrPort("10.96.0.10:53")))
	assert.False(t, pol.decide("", netip.MustParseAddrPort("10.96.0.10:54")).allowed)
	assert.False(t, pol.decide("", netip.MustParseAddrPort("10.96.0.11:53")).allowed)
}

// In a dry run a silent client to an address the policy would deny is not held back: the
// server-first protocol goes on at once, and the record says it would have been denied.
func TestEgressDryRunLetsAServerFirstProtocolThrough(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "220 ready\n")
			c.Close()
		}
	}()
	f := newFixture(t, denyAllBut(`{host: api.example.com}`, "    dryRun: true\n"))
	c := f.dial(netip.MustParseAddrPort(ln.Addr().String()))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "220 ready\n", got)
	recs := f.auditRecords("egress would be denied")
	require.Len(t, recs, 1)
	assert.Contains(t, recs[0]["reason"], "the client sent nothing")
}

// TestEgressDecisionsAreMetrics: each decision is counted by result, rule and protocol (the
// authbridge's /metrics), allowed ones too, and a dry run's would-be denials apart.
func TestEgressDecisionsAreMetrics(t *testing.T) {
	count := func(result, rule, protocol string) float64 {
		return telemetry.Default.Sum("kagenti_authbridge_egress_total", map[string]string{"result": result, "rule": rule, "protocol": protocol})
	}
	allowed, denied, wouldDeny := count("allow", "allow[0]", "http"), count("deny", "default", "http"), count("would_deny", "default", "tcp")

	up := callee(t)
	f := newFixture(t, denyAllBut(`{host: api.example.com}`))
	status, _, body := f.get(up, "api.example.com")
	require.Equal(t, http.StatusOK, status, body)
	status, h, body := f.get(up, "elsewhere.example.org")
	egressDenial(t, status, h, body)
	assert.Equal(t, allowed+1, count("allow", "allow[0]", "http"))
	assert.Equal(t, denied+1, count("deny", "default", "http"))

	dst, _ := lineEchoServer(t, "127.0.0.1:0")
	dry := newFixture(t, denyAllBut(`{host: api.example.com}`, "    dryRun: true\n"))
	assert.True(t, echo(t, dry.dial(dst), "hello"))
	assert.Equal(t, wouldDeny+1, count("would_deny", "default", "tcp"))
}
