package outbound

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// viaProxy is a client that uses the fixture's listener as its HTTP proxy, as an agent with
// HTTP_PROXY/HTTPS_PROXY set does (no redirect: the fixture's Destination finds none).
func (f *fixture) viaProxy() *http.Client {
	proxy, _ := url.Parse("http://" + f.addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
}

func get(t *testing.T, c *http.Client, target, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, target, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestExplicitProxyDecidesAsTheTransparentPath: an absolute-form request to the proxy itself is
// routed and exchanged exactly as a redirected one for the same host; a host whose rule passes
// through, and the identity provider, pass with the caller's own token.
func TestExplicitProxyDecidesAsTheTransparentPath(t *testing.T) {
	f := newFixture(t, rules)
	port := strconv.Itoa(int(callee(t).Port()))
	client := f.viaProxy()
	for _, tc := range []struct{ host, want string }{
		{"api.example.com", "auth=Bearer exchanged(user-token→api|read write)"},
		{"API.example.com", "auth=Bearer exchanged(user-token→api|read write)"},
		{"weather.tools.svc.cluster.local", "auth=Bearer exchanged(user-token→tools|)"},
		{"elsewhere.example.org", "auth=Bearer exchanged(user-token→fallback|)"},
		{"storage.googleapis.com", "auth=Bearer user-token"}, // pass-through rule
		{"127.0.0.1", "auth=Bearer exchanged(user-token→fallback|)"},
	} {
		status, body := get(t, client, "http://"+tc.host+":"+port+"/path", "user-token")
		assert.Equal(t, http.StatusOK, status, tc.host)
		assert.Contains(t, body, tc.want, tc.host)
		assert.Contains(t, body, "host="+tc.host+":"+port, "the callee sees the host the client named")
	}
	f.dst.Store(&[]netip.AddrPort{callee(t)}[0])
	for _, host := range []string{"api.example.com", "storage.googleapis.com"} {
		_, transparent := f.call(*f.dst.Load(), host, "user-token")
		f.dst.Store(nil)
		_, explicit := get(t, client, "http://"+host+":"+port+"/path", "user-token")
		f.dst.Store(&[]netip.AddrPort{callee(t)}[0])
		assert.Equal(t, strings.SplitN(transparent, "auth=", 2)[1], strings.SplitN(explicit, "auth=", 2)[1], "%s: the same token either way", host)
	}

	u, _ := url.Parse(f.idp.URL)
	f.dst.Store(nil)
	calls := len(f.idp.Calls())
	status, _ := get(t, client, f.idp.URL+"/token", "user-token")
	assert.Equal(t, http.StatusMethodNotAllowed, status, "the token endpoint (%s) got the GET as sent", u.Host)
	assert.Len(t, f.idp.Calls(), calls, "no exchange for a request to the identity provider")
}

// TestExplicitProxyDestinationIsPerRequest: one keep-alive connection to the proxy carries
// requests for two hosts; each goes where its own request line says, with its own route.
func TestExplicitProxyDestinationIsPerRequest(t *testing.T) {
	f := newFixture(t, rules)
	a, b := callee(t), callee(t)
	c, err := net.Dial("tcp", f.addr)
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	for _, tc := range []struct {
		dst  netip.AddrPort
		host string
		want string
	}{
		{a, "api.example.com", "exchanged(user-token→api|read write)"},
		{b, "storage.googleapis.com", "auth=Bearer user-token"},
		{a, "weather.tools.svc.cluster.local", "exchanged(user-token→tools|)"},
	} {
		target := fmt.Sprintf("http://%s:%d/x", tc.host, tc.dst.Port())
		_, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: ignored.example\r\nAuthorization: Bearer user-token\r\n\r\n", target)
		require.NoError(t, err)
		resp, err := http.ReadResponse(r, nil)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, target)
		assert.Contains(t, string(body), tc.want, target)
		assert.Contains(t, string(body), fmt.Sprintf("host=%s:%d", tc.host, tc.dst.Port()), "the request line's host, never the Host header (RFC 9112 §3.2.2)")
	}
}

// TestExplicitProxyTunnelsConnect: CONNECT opens a tunnel for TLS; what passes through it (the
// Authorization header inside TLS) is untouched, and no exchange is made.
func TestExplicitProxyTunnelsConnect(t *testing.T) {
	f := newFixture(t, rules)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls host=%s auth=%s", r.Host, r.Header.Get("Authorization"))
	}))
	t.Cleanup(srv.Close)
	port := strconv.Itoa(int(netip.MustParseAddrPort(srv.Listener.Addr().String()).Port()))
	tr := srv.Client().Transport.(*http.Transport).Clone()
	proxy, _ := url.Parse("http://" + f.addr)
	tr.Proxy = http.ProxyURL(proxy)
	tr.TLSClientConfig.ServerName = "example.com" // httptest's certificate
	for _, host := range []string{"elsewhere.example.org", "storage.googleapis.com", "127.0.0.1"} {
		status, body := get(t, &http.Client{Transport: tr}, "https://"+host+":"+port+"/secure", "user-token")
		assert.Equal(t, http.StatusOK, status, host)
		assert.Equal(t, "tls host="+host+":"+port+" auth=Bearer user-token", body, host)
	}
	assert.Empty(t, f.idp.Calls(), "nothing to exchange inside TLS")
}

// TestExplicitProxyRefusesConnectToAnExchangeRoute: a CONNECT to a host whose destination rule
// exchanges the token is refused, with the rule named: tunnelled, the request would reach it with
// the caller's own token.
func TestExplicitProxyRefusesConnectToAnExchangeRoute(t *testing.T) {
	f := newFixture(t, rules)
	up := callee(t)
	status, body := rawRequest(t, f, fmt.Sprintf("CONNECT api.example.com:%d HTTP/1.1\r\nHost: api.example.com:%d\r\n\r\n", up.Port(), up.Port()))
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, `destination rule \"api.example.com\" exchanges the token for audience \"api\", which cannot be done inside TLS`)
	assert.Empty(t, f.idp.Calls())
}

// TestExplicitProxyRefusesBadRequests: requests an HTTP proxy cannot serve get a 4xx naming what
// is wrong; none reaches a destination or the identity provider.
func TestExplicitProxyRefusesBadRequests(t *testing.T) {
	f := newFixture(t, rules)
	up := callee(t)
	self := netip.MustParseAddrPort(f.addr)
	for _, tc := range []struct {
		name, request string
		status        int
		want          string
	}{
		{"origin form", "GET /path HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 400, "must name its destination in absolute form"},
		{"https in absolute form", "GET https://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 400, "an HTTPS client uses CONNECT"},
		{"other scheme", "GET ftp://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 400, `unsupported scheme \"ftp\"`},
		{"bad port", "GET http://api.example.com:99999/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, `invalid port \"99999\"`},
		{"CONNECT without port", "CONNECT api.example.com HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 400, `CONNECT \"api.example.com\": the target must be host:port`},
		{"unresolvable host", fmt.Sprintf("GET http://nowhere.invalid:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", up.Port()), 502, "nowhere.invalid does not resolve"},
		{"the proxy itself", fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: x\r\n\r\n", self), 400, "is the proxy itself"},
		{"the proxy itself by loopback name", fmt.Sprintf("GET http://localhost:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", self.Port()), 400, "is the proxy itself"},
		{"CONNECT to the proxy itself", fmt.Sprintf("CONNECT [::1]:%d HTTP/1.1\r\nHost: x\r\n\r\n", self.Port()), 400, "is the proxy itself"},
		{"not HTTP", "HELLO, this is no request line\r\n\r\n", 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawRequest(t, f, tc.request)
			assert.Equal(t, tc.status, status)
			assert.Contains(t, body, tc.want)
		})
	}
	assert.Empty(t, f.idp.Calls())
}

// rawRequest writes request on a fresh connection to the proxy (not redirected) and reads one
// response.
func rawRequest(t *testing.T, f *fixture, request string) (int, string) {
	t.Helper()
	f.dns.set("localhost", "127.0.0.1")
	c, err := net.Dial("tcp", f.addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, request)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
