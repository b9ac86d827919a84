package outbound

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// The explicit proxy: in the injector's proxy mode nothing redirects the agent's connections (no
// proxy-init, no NET_ADMIN); the agent's HTTP clients send their requests to this listener
// because HTTP_PROXY and HTTPS_PROXY name it. Such a connection has no original destination (or
// its original destination is the listener itself), and each request on it names where it goes:
//
//   - an absolute-form request, `GET http://callee.ns.svc:8080/x HTTP/1.1`, is proxied like a
//     redirected one: the same route decision (routeName, Decide), the same exchange, the same
//     ReverseProxy; only the destination comes from the request line (its host resolved here,
//     through the same name cache) instead of the connection's original destination. A keep-alive
//     connection may carry requests for several hosts: the destination is per request.
//   - `CONNECT host:port` opens a tunnel to host:port, for TLS (HTTPS_PROXY): the bytes pass
//     untouched, no token is exchanged (it is inside TLS). A CONNECT to a host that a destination
//     rule of the TokenExchange sends through the exchange is refused (403): the caller's own token
//     would reach a destination that is to receive only exchanged ones. The default target does not
//     refuse (every HTTPS call, to an LLM API say, would be): TLS to such a host is tunnelled, as
//     transparent mode tunnels it.
//
// A host the client's NO_PROXY lists never reaches the proxy: the client connects to it directly,
// and nothing is exchanged. So does a client that ignores HTTP_PROXY (docs/identity.md).

// explicitKey carries the proxy's own address on an explicit connection, in place of ctxKey's
// original destination.
type explicitKey struct{}

// isSelf reports whether dst is the proxy's own listening address self.
func isSelf(dst, self netip.AddrPort) bool {
	a := dst.Addr().Unmap()
	return dst.Port() == self.Port() && (a.IsLoopback() || a.IsUnspecified() || a == self.Addr().Unmap())
}

// explicitRequest finds the destination of a request on an explicit connection, and serves a
// CONNECT itself. ok is false when the request was answered (refused, or tunnelled); else r
// carries the destination in its context as a redirected request does.
func (p *Proxy) explicitRequest(w http.ResponseWriter, r *http.Request) (_ *http.Request, dst netip.AddrPort, ok bool) {
	self, _ := r.Context().Value(explicitKey{}).(netip.AddrPort)
	authority, err := explicitAuthority(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "kagenti outbound proxy: "+err.Error())
		return r, dst, false
	}
	host, port, _ := net.SplitHostPort(authority)
	dst, status, err := p.resolve(host, port, self)
	if err != nil {
		code := "invalid_request"
		if status == http.StatusBadGateway {
			code = "upstream_unavailable"
		}
		writeError(w, status, code, "kagenti outbound proxy: "+err.Error())
		return r, dst, false
	}
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, dst))
	if r.Method == http.MethodConnect {
		p.connect(w, r, authority, dst)
		return r, dst, false
	}
	return r, dst, true
}

// explicitAuthority returns the host:port a request to the explicit proxy names, or why it names
// none the proxy serves.
func explicitAuthority(r *http.Request) (string, error) {
	if r.ProtoMajor != 1 {
		return "", fmt.Errorf("%s request to the proxy itself: as an HTTP proxy (HTTP_PROXY) it takes HTTP/1.1 requests in absolute form and CONNECT", r.Proto)
	}
	if r.Method == http.MethodConnect {
		host, port, err := net.SplitHostPort(r.Host)
		if err != nil || host == "" || !validPort(port) {
			return "", fmt.Errorf("CONNECT %q: the target must be host:port", r.Host)
		}
		return r.Host, nil
	}
	switch {
	case !r.URL.IsAbs():
		return "", fmt.Errorf("%s %s: a request to the proxy itself must name its destination in absolute form (%s http://host:port/path): set the proxy as HTTP_PROXY, not as the server",
			r.Method, r.RequestURI, r.Method)
	case r.URL.Scheme == "https":
		return "", fmt.Errorf("%s %s: the proxy does not originate TLS; an HTTPS client uses CONNECT (HTTPS_PROXY)", r.Method, r.RequestURI)
	case r.URL.Scheme != "http":
		return "", fmt.Errorf("%s %s: unsupported scheme %q; accepted: http (and CONNECT for TLS)", r.Method, r.RequestURI, r.URL.Scheme)
	case r.URL.Hostname() == "":
		return "", fmt.Errorf("%s %s: no host", r.Method, r.RequestURI)
	}
	port := r.URL.Port()
	if port == "" {
		port = "80"
	} else if !validPort(port) {
		return "", fmt.Errorf("%s %s: invalid port %q", r.Method, r.RequestURI, port)
	}
	return net.JoinHostPort(r.URL.Hostname(), port), nil
}

func validPort(s string) bool {
	n, err := strconv.ParseUint(s, 10, 16)
	return err == nil && n > 0
}

// resolve returns the address a request naming host:port goes to: host itself when it is an
// address, else the first address it resolves to (through the cache routeName reads, so the
// route is then chosen by the name). A destination that is the proxy itself is refused.
func (p *Proxy) resolve(host, port string, self netip.AddrPort) (netip.AddrPort, int, error) {
	n, _ := strconv.ParseUint(port, 10, 16)
	var addr netip.Addr
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		addr = a.Unmap().WithZone("")
	} else {
		addrs := p.names.lookup(p.Resolver, hostName(host))
		if len(addrs) == 0 {
			return netip.AddrPort{}, http.StatusBadGateway, fmt.Errorf("%s does not resolve", host)
		}
		addr = addrs[0]
	}
	dst := netip.AddrPortFrom(addr, uint16(n))
	if isSelf(dst, self) {
		return dst, http.StatusBadRequest, fmt.Errorf("%s is the proxy itself (%s): refused, it would loop", net.JoinHostPort(host, port), self)
	}
	return dst, 0, nil
}

// connect serves CONNECT authority (resolved to dst): a refusal when a destination rule requires
// the exchange there, else a tunnel, the client's bytes passing untouched both ways.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request, authority string, dst netip.AddrPort) {
	if !p.egressAllowsRequest(w, r, dst, "connect") {
		return
	}
	c := p.cfg.Current().Config
	if d := Decide(c, p.routeName(r.Host, dst), strconv.Itoa(int(dst.Port()))); d.Exchange && d.Rule != "" {
		writeError(w, http.StatusForbidden, "exchange_required_over_tls", fmt.Sprintf(
			"kagenti outbound proxy: CONNECT %s refused: destination rule %q exchanges the token for audience %q, which cannot be done inside TLS; call http://%s through the proxy (the mesh or the callee's sidecar terminates TLS)",
			authority, d.Rule, d.Target.Audience, authority))
		return
	}
	upstream, err := p.dialer.DialContext(r.Context(), "tcp", dst.String())
	if err != nil {
		writeError(w, http.StatusBadGateway, "upstream_unavailable", fmt.Sprintf("kagenti outbound proxy: %s (%s) did not answer: %v", authority, dst, err))
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		writeError(w, http.StatusInternalServerError, "internal_error", "kagenti outbound proxy: CONNECT: "+err.Error())
		return
	}
	_ = client.SetDeadline(time.Time{}) // the server's header and idle timeouts are not the tunnel's
	if _, err := brw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n"); err == nil {
		err = brw.Flush()
	}
	if err != nil {
		client.Close()
		upstream.Close()
		return
	}
	// What the client sent after the CONNECT (its TLS ClientHello, say) may already be buffered.
	early, _ := brw.Reader.Peek(brw.Reader.Buffered())
	early = append([]byte(nil), early...)
	if rc, ok := client.(*redirectedConn); ok {
		client = rc.Conn // relay half-closes the TCP connection itself
	}
	if err := relay(client, upstream, early, nil); err != nil {
		p.log.Info("tunnel failed", zap.String("to", authority), zap.Stringer("address", dst), zap.Error(err))
	}
}
