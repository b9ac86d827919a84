package outbound

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/inbound"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/svidtest"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

const (
	callerSVID = "spiffe://cluster.local/ns/agents/sa/caller"
	calleeSVID = "spiffe://cluster.local/ns/agents/sa/callee"
)

// sidecarCallee is a callee behind the inbound proxy's mTLS listener in mode, presenting svid
// and trusting cas; it answers with the peer's SPIFFE ID it verified.
func sidecarCallee(t *testing.T, mode string, ca *svidtest.CA, svid string, cas ...*svidtest.CA) netip.AddrPort {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	src := svidtest.NewSource(ca.SVID(t, svid), cas...)
	ml := inbound.MTLSListener(ln, mode, src, ca.TD, zap.NewNop())
	srv := &http.Server{ConnContext: inbound.ConnContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "peer=%s auth=%s", inbound.PeerID(r), r.Header.Get("Authorization"))
	})}
	go func() { _ = srv.Serve(ml) }()
	t.Cleanup(func() { _ = srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

func mtlsCaller(t *testing.T, mode string, ca *svidtest.CA) *fixture {
	f := newFixture(t, rules)
	f.proxy.OriginateMTLS(mode, svidtest.NewSource(ca.SVID(t, callerSVID), ca), ca.TD)
	return f
}

func TestStrictCallerOriginatesMTLSToASidecar(t *testing.T) {
	ca := svidtest.NewCA(t, "cluster.local")
	dst := sidecarCallee(t, authconfig.MTLSStrict, ca, calleeSVID, ca)
	f := mtlsCaller(t, authconfig.MTLSStrict, ca)
	status, body := f.call(dst, "callee:8080", "")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "peer="+callerSVID+" auth=", body, "the callee verified the caller's SVID; the client spoke plain HTTP")
}

func TestStrictCallerSendsNothingToADestinationWithoutMTLS(t *testing.T) {
	ca := svidtest.NewCA(t, "cluster.local")
	f := mtlsCaller(t, authconfig.MTLSStrict, ca)
	status, body := f.call(callee(t), "plain:8080", "")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, `"error":"mtls_unavailable"`)
	assert.Contains(t, body, "mtls.mode is strict and plain:8080")
}

func TestStrictCallerRefusesACalleeOfAnotherTrustDomain(t *testing.T) {
	ca, evil := svidtest.NewCA(t, "cluster.local"), svidtest.NewCA(t, "evil.example")
	dst := sidecarCallee(t, authconfig.MTLSPermissive, evil, "spiffe://evil.example/ns/agents/sa/callee", ca, evil)
	f := mtlsCaller(t, authconfig.MTLSStrict, ca)
	status, body := f.call(dst, "callee:8080", "")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, `no X.509 bundle for trust domain \"evil.example\"`)
}

func TestPermissiveCallerFallsBackToPlainHTTPAndRemembers(t *testing.T) {
	ca := svidtest.NewCA(t, "cluster.local")
	f := mtlsCaller(t, authconfig.MTLSPermissive, ca)
	plain := callee(t)
	for range 2 {
		status, body := f.call(plain, "plain:8080", "")
		require.Equal(t, http.StatusOK, status, body)
		assert.Contains(t, body, "proto=HTTP/1.1")
	}
	assert.Len(t, f.logs.FilterMessage("destination does not answer mTLS: plain HTTP (mtls.mode permissive)").All(), 1,
		"the destination is tried once, then remembered as plaintext")

	// A sidecar still gets mTLS.
	status, body := f.call(sidecarCallee(t, authconfig.MTLSPermissive, ca, calleeSVID, ca), "callee:8080", "")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "peer="+callerSVID+" auth=", body)
}

func TestPublicDestinationsAreNotOriginatedMTLS(t *testing.T) {
	for addr, want := range map[string]bool{"10.1.2.3": true, "192.168.0.1": true, "fd00::1": true, "100.64.0.1": true, "127.0.0.1": true, "8.8.8.8": false, "2001:4860::8888": false} {
		assert.Equal(t, want, sidecarAddress(netip.MustParseAddr(addr)), addr)
	}
}

// A request body survives the permissive fallback: the failed handshake sent none of it.
func TestPermissiveFallbackKeepsTheRequestBody(t *testing.T) {
	ca := svidtest.NewCA(t, "cluster.local")
	f := mtlsCaller(t, authconfig.MTLSPermissive, ca)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "got=%s", b)
	}))
	t.Cleanup(srv.Close)
	dst := netip.MustParseAddrPort(srv.Listener.Addr().String())
	f.dst.Store(&dst)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Post("http://"+f.addr+"/tasks", "application/json", strings.NewReader(`{"method":"message/send"}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Equal(t, `got={"method":"message/send"}`, string(b))
}

// A token exchanged for a SPIFFE ID goes, over mTLS, only to a destination presenting that SVID:
// a sidecar of another workload of the trust domain at the address (a stale Service endpoint, a
// reused pod IP) is refused before the request is written, in strict and in permissive mode (no
// plain-HTTP fallback: it is a kagenti sidecar, just not the callee).
func TestExchangedTokenGoesOnlyToTheSVIDItIsFor(t *testing.T) {
	ca := svidtest.NewCA(t, "cluster.local")
	route := "outbound:\n  tokenExchange:\n    defaultTarget: {audience: fallback}\n    destinationRules:\n" +
		"    - match: {host: \"callee.agents.svc\"}\n      target: {audience: \"" + calleeSVID + "\"}\n"
	for _, mode := range []string{authconfig.MTLSStrict, authconfig.MTLSPermissive} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t, route)
			f.proxy.Resolver = newFakeDNS(map[string]string{"callee.agents.svc": "127.0.0.1"})
			f.proxy.OriginateMTLS(mode, svidtest.NewSource(ca.SVID(t, callerSVID), ca), ca.TD)

			status, body := f.call(sidecarCallee(t, authconfig.MTLSStrict, ca, calleeSVID, ca), "callee.agents.svc:8080", "user-token")
			require.Equal(t, http.StatusOK, status, body)
			assert.Contains(t, body, "peer="+callerSVID+" auth=Bearer ", "the callee got the exchanged token over mTLS")

			impostor := sidecarCallee(t, authconfig.MTLSStrict, ca, "spiffe://cluster.local/ns/agents/sa/impostor", ca)
			status, body = f.call(impostor, "callee.agents.svc:8080", "user-token")
			assert.Equal(t, http.StatusServiceUnavailable, status)
			assert.Contains(t, body, `"error":"`+ErrPeerMismatch+`"`)
			assert.Contains(t, body, "presented spiffe://cluster.local/ns/agents/sa/impostor, and the exchanged token is for "+calleeSVID)
		})
	}
}
