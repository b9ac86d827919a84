package inbound

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/svidtest"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

const (
	callerID = "spiffe://cluster.local/ns/agents/sa/caller"
	otherID  = "spiffe://cluster.local/ns/agents/sa/other"
)

// mtlsFixture is the inbound proxy behind MTLSListener in mode, with the callee's SVID from ca.
type mtlsFixture struct {
	*fixture
	ca     *svidtest.CA
	server *svidtest.Source
	addr   string
	logs   *observer.ObservedLogs
}

func newMTLSFixture(t *testing.T, mode string) *mtlsFixture {
	f, logs := observed(t)
	ca := svidtest.NewCA(t, "cluster.local")
	src := svidtest.NewSource(ca.SVID(t, audience), ca)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ml := MTLSListener(ln, mode, src, ca.TD, f.proxy.log)
	srv := &http.Server{Handler: f.proxy, Protocols: ServerProtocols(), ReadHeaderTimeout: 10 * time.Second, ConnContext: ConnContext}
	go func() { _ = srv.Serve(ml) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &mtlsFixture{fixture: f, ca: ca, server: src, addr: ln.Addr().String(), logs: logs}
}

// client is a sidecar presenting the SVID of src: mTLS with ALPN kagenti-mtls/1, the server's SVID
// checked against the trust domain.
func (m *mtlsFixture) client(src *svidtest.Source) *http.Client {
	cfg := tlsconfig.MTLSClientConfig(src, src, tlsconfig.AuthorizeMemberOf(m.ca.TD))
	cfg.NextProtos = []string{contract.MTLSALPN}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

func (m *mtlsFixture) do(c *http.Client, scheme, token string) (answer, error) {
	req, err := http.NewRequest(http.MethodGet, scheme+"://"+m.addr+"/tasks", nil)
	require.NoError(m.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, text: string(b)}
	_ = json.Unmarshal(b, &a.body)
	return a, nil
}

// callerToken is a valid token the caller's workload holds (its client is its SPIFFE ID).
func (m *mtlsFixture) callerToken() string {
	return m.token(m.valid(map[string]any{"azp": callerID}))
}

func TestStrictMTLSAdmitsASidecarAndShowsThePeerToRules(t *testing.T) {
	m := newMTLSFixture(t, authconfig.MTLSStrict)
	m.withPolicy(`inbound: {authorization: {rules: [{name: from-caller, effect: Allow, when: 'peer == "` + callerID + `"'}]}}` + "\n")
	caller := m.client(svidtest.NewSource(m.ca.SVID(t, callerID), m.ca))

	a, err := m.do(caller, "https", m.callerToken())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, a.status, a.text)
	assert.Equal(t, "agent: /tasks", a.text)

	other := m.client(svidtest.NewSource(m.ca.SVID(t, otherID), m.ca))
	a, err = m.do(other, "https", m.token(m.valid(map[string]any{"azp": otherID})))
	require.NoError(t, err)
	assert.Equal(t, http.StatusForbidden, a.status, "the rule reads the peer's SPIFFE ID: %s", a.text)
	denied := m.logs.FilterMessage("request denied").All()
	require.Len(t, denied, 1)
	assert.Equal(t, otherID, denied[0].ContextMap()["peer"], "the audit record names the peer")

	a, err = m.do(caller, "https", "")
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, a.status, "a valid mTLS peer still needs a token")
}

func TestStrictMTLSRefusesPlaintextWithTheReason(t *testing.T) {
	m := newMTLSFixture(t, authconfig.MTLSStrict)
	a, err := m.do(http.DefaultClient, "http", m.callerToken())
	require.NoError(t, err)
	assert.Equal(t, http.StatusUpgradeRequired, a.status)
	assert.Equal(t, ErrMTLSRequired, a.body["error"], a.text)
	assert.Contains(t, a.body["error_description"], "mtls.mode is strict")
	refused := m.logs.FilterMessage("connection refused").All()
	require.Len(t, refused, 1)
	assert.Equal(t, ErrMTLSRequired, refused[0].ContextMap()["error"])
}

func TestStrictMTLSRefusesATLSClientWithoutAnSVID(t *testing.T) {
	m := newMTLSFixture(t, authconfig.MTLSStrict)
	src := svidtest.NewSource(nil, m.ca)
	cfg := tlsconfig.TLSClientConfig(src, tlsconfig.AuthorizeMemberOf(m.ca.TD))
	cfg.NextProtos = []string{contract.MTLSALPN}
	_, err := m.do(&http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}, "https", m.callerToken())
	require.Error(t, err, "no client certificate: the handshake fails")
}

func TestMTLSRefusesAPeerOfAnotherTrustDomain(t *testing.T) {
	m := newMTLSFixture(t, authconfig.MTLSStrict)
	evil := svidtest.NewCA(t, "evil.example")
	// The peer trusts the callee's bundle, but its own SVID is from another trust domain.
	_, err := m.do(m.client(svidtest.NewSource(evil.SVID(t, "spiffe://evil.example/ns/agents/sa/caller"), m.ca, evil)), "https", m.callerToken())
	require.Error(t, err)
	refused := m.logs.FilterMessage("mTLS peer refused").All()
	require.Len(t, refused, 1)
	assert.Equal(t, "spiffe://evil.example/ns/agents/sa/caller", refused[0].ContextMap()["peer"])
	assert.Contains(t, refused[0].ContextMap()["reason"], `no X.509 bundle for trust domain "evil.example"`)
}

func TestMTLSRefusesAnExpiredSVID(t *testing.T) {
	m := newMTLSFixture(t, authconfig.MTLSStrict)
	expired := m.ca.SVIDValid(t, callerID, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	_, err := m.do(m.client(svidtest.NewSource(expired, m.ca)), "https", m.callerToken())
	require.Error(t, err)
	refused := m.logs.FilterMessage("mTLS peer refused").All()
	require.Len(t, refused, 1)
	assert.Contains(t, refused[0].ContextMap()["reason"], "expired")
}

func TestPermissiveMTLSServesBoth(t *testing.T) {
	m := newMTLSFixture(t, authconfig.MTLSPermissive)
	a, err := m.do(http.DefaultClient, "http", m.callerToken())
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, a.status, a.text)
	a, err = m.do(m.client(svidtest.NewSource(m.ca.SVID(t, callerID), m.ca)), "https", m.callerToken())
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, a.status, a.text)
}

// A token whose caller is a SPIFFE ID is bound to the mTLS peer: another workload presenting it
// over its own mTLS connection is refused.
func TestMTLSPeerMustBeTheTokensCaller(t *testing.T) {
	m := newMTLSFixture(t, authconfig.MTLSStrict)
	other := m.client(svidtest.NewSource(m.ca.SVID(t, otherID), m.ca))
	a, err := m.do(other, "https", m.callerToken())
	require.NoError(t, err)
	assert.Equal(t, http.StatusForbidden, a.status)
	assert.Equal(t, ErrPeerMismatch, a.body["error"], a.text)
	assert.Contains(t, a.body["error_description"], "the token's caller "+callerID+" is not the mTLS peer "+otherID)
}

// A new SVID from the source is presented on new handshakes; an open connection keeps working on
// the one it was made with.
func TestMTLSRotationAppliesToNewConnectionsAndKeepsOpenOnes(t *testing.T) {
	m := newMTLSFixture(t, authconfig.MTLSStrict)
	caller := m.client(svidtest.NewSource(m.ca.SVID(t, callerID), m.ca))
	serial := func(c *http.Client) (string, bool) {
		var state *tls.ConnectionState
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			reused = i.Reused
			if tc, ok := i.Conn.(*tls.Conn); ok {
				s := tc.ConnectionState()
				state = &s
			}
		}}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, "https://"+m.addr+"/tasks", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+m.callerToken())
		resp, err := c.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NotNil(t, state)
		return state.PeerCertificates[0].SerialNumber.String(), reused
	}
	first, _ := serial(caller)
	m.server.Set(m.ca.SVID(t, audience))

	again, reused := serial(caller)
	assert.True(t, reused, "the open connection is kept")
	assert.Equal(t, first, again, "and keeps its SVID")

	fresh, reused := serial(m.client(svidtest.NewSource(m.ca.SVID(t, callerID), m.ca)))
	assert.False(t, reused)
	assert.NotEqual(t, first, fresh, "a new handshake presents the rotated SVID")
}

func TestPeerIDIsEmptyOnPlaintext(t *testing.T) {
	r, _ := http.NewRequest(http.MethodGet, "http://x/", strings.NewReader(""))
	assert.Empty(t, PeerID(r))
}

// agentcardID is the SPIFFE ID of agentcard's controller, which fetches agent cards over mutual
// TLS (agentcard's attested fetch, docs/agentcard.md).
const agentcardID = "spiffe://cluster.local/ns/kagenti-system/sa/kagenti-agentcard"

// attestedFetcher is a client set up as agentcard's attested card fetch: its own SVID, the
// callee's SPIFFE ID required of the server (not only its trust domain), ALPN kagenti-mtls/1 with
// http/1.1 after it (for an agent that terminates mutual TLS itself), no connection kept, and no
// token.
func (m *mtlsFixture) attestedFetcher(t *testing.T) *http.Client {
	src := svidtest.NewSource(m.ca.SVID(t, agentcardID), m.ca)
	cfg := tlsconfig.MTLSClientConfig(src, src, tlsconfig.AuthorizeID(spiffeid.RequireFromString(audience)))
	cfg.NextProtos = []string{contract.MTLSALPN, "http/1.1"}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

func (m *mtlsFixture) fetch(c *http.Client, url string) (answer, *tls.ConnectionState) {
	m.t.Helper()
	resp, err := c.Get(url)
	require.NoError(m.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, text: string(b)}
	_ = json.Unmarshal(b, &a.body)
	return a, resp.TLS
}

// The agent card is a public path: agentcard's attested fetch (its controller's SVID, no token)
// gets it through a strict or permissive inbound over mutual TLS, as a plaintext fetch gets it
// where plaintext is served; a path that needs a token still needs one from that peer.
func TestAttestedCardFetchGetsTheCardWithoutAToken(t *testing.T) {
	for _, mode := range []string{authconfig.MTLSStrict, authconfig.MTLSPermissive} {
		t.Run(mode, func(t *testing.T) {
			m := newMTLSFixture(t, mode)
			m.withPolicy(`inbound: {authorization: {rules: [{name: from-caller, effect: Allow, when: 'peer == "` + callerID + `"'}]}}` + "\n")
			c := m.attestedFetcher(t)

			a, state := m.fetch(c, "https://"+m.addr+"/.well-known/agent-card.json")
			require.Equal(t, http.StatusOK, a.status, a.text)
			assert.Equal(t, "agent: /.well-known/agent-card.json", a.text)
			require.NotNil(t, state)
			assert.Equal(t, contract.MTLSALPN, state.NegotiatedProtocol, "the inbound selects the sidecar protocol")

			a, _ = m.fetch(c, "https://"+m.addr+"/tasks")
			assert.Equal(t, http.StatusUnauthorized, a.status, "only the public paths go without a token: %s", a.text)

			plain, _ := m.fetch(http.DefaultClient, "http://"+m.addr+"/.well-known/agent-card.json")
			if mode == authconfig.MTLSStrict {
				assert.Equal(t, http.StatusUpgradeRequired, plain.status, plain.text)
				assert.Contains(t, plain.header.Values("Upgrade"), "TLS/1.3, TLS/1.2", "the refusal says what to speak instead")
			} else {
				assert.Equal(t, http.StatusOK, plain.status, "the plain-mode rule for the card path: %s", plain.text)
			}
		})
	}
}

// A TLS client that offers only the HTTP protocols, even with a valid SVID, fails the handshake:
// a fetcher must offer kagenti-mtls/1 (or no ALPN at all).
func TestMTLSRefusesAClientOfferingOnlyHTTPProtocols(t *testing.T) {
	m := newMTLSFixture(t, authconfig.MTLSStrict)
	src := svidtest.NewSource(m.ca.SVID(t, agentcardID), m.ca)
	cfg := tlsconfig.MTLSClientConfig(src, src, tlsconfig.AuthorizeMemberOf(m.ca.TD))
	cfg.NextProtos = []string{"h2", "http/1.1"}
	_, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}).Get("https://" + m.addr + "/.well-known/agent-card.json")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no application protocol")
}
