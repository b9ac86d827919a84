package outbound

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/telemetry"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// The egress policy (outbound.egress, docs/authorization.md "Egress policy"): which destinations
// the workload may reach at all. It is decided before any exchange, on what the proxy verifies of
// a connection, never on what the client merely says:
//
//   - the destination address and port (the original destination of a redirected connection, the
//     resolved authority of a proxy-mode request): cidr rules;
//   - a name that address answers to: the request's Host (HTTP), the ClientHello's SNI (TLS) or
//     the authority (proxy mode), taken only when it resolves to the destination (routeName):
//     host and agent rules. A Host naming an allowed host on a connection to anywhere else is
//     no name at all, and so denied unless a cidr rule allows the address.
//
// Raw TCP (and TLS without SNI) has no name: only cidr rules can allow it. The policy is read at
// each decision: a reload applies to the next connection and to the next request on a kept-alive
// HTTP connection; a tunnel (TLS, TCP, CONNECT) that was allowed when it opened stays open.

// Names of the decisions that are no allow rule.
const (
	egressRuleDefault = "default"
	// egressRuleDNS: TCP to a name server of the pod's resolv.conf on port 53, without which the
	// pod's own lookups that fall back to TCP would fail under a deny default.
	egressRuleDNS = "dns"
)

// ErrEgressDenied is the error code of a request the egress policy denies.
const ErrEgressDenied = "egress_denied"

// EgressDeniedHeader names the policy that refused a request, so that a client (or a person
// reading its logs) can tell the proxy's 403 from the destination's.
const EgressDeniedHeader = "Kagenti-Egress-Denied"

// egressPolicy is outbound.egress compiled.
type egressPolicy struct {
	deny, dryRun bool
	rules        []egressRule
	dns          []netip.Addr
	// identity of the workload, for the audit records.
	caller, workload string
}

type egressRule struct {
	name  string
	hosts []string // lower case; a pattern may end in :port
	cidr  netip.Prefix
	ports []uint16 // any when empty
}

type egressDecision struct {
	allowed bool
	rule    string
	reason  string
}

func compileEgress(c authconfig.Config, dns []netip.Addr) *egressPolicy {
	e := c.Outbound.Egress
	p := &egressPolicy{deny: e.Default == authconfig.EgressDeny, dryRun: e.DryRun, dns: dns,
		caller: c.SpiffeID, workload: c.Workload.Namespace + "/" + c.Workload.Name}
	for i, a := range e.Allow {
		r := egressRule{name: fmt.Sprintf("allow[%d]", i), hosts: a.Hosts}
		if a.CIDR != "" {
			// Resolve validated it; a prefix that does not parse stays invalid and matches nothing.
			r.cidr, _ = netip.ParsePrefix(a.CIDR)
			r.cidr = r.cidr.Masked()
		}
		for _, port := range a.Ports {
			r.ports = append(r.ports, uint16(port))
		}
		p.rules = append(p.rules, r)
	}
	return p
}

// open reports whether the policy lets everything through without looking: no default deny, and
// so no rule that could change the answer.
func (p *egressPolicy) open() bool { return !p.deny }

// decide applies the policy to a connection to dst, of which name ("" for none) is a verified
// name: the first rule that allows it decides, else the default.
func (p *egressPolicy) decide(name string, dst netip.AddrPort) egressDecision {
	addr, port := dst.Addr().Unmap(), dst.Port()
	if port == 53 && slices.Contains(p.dns, addr) {
		return egressDecision{allowed: true, rule: egressRuleDNS}
	}
	portStr := ""
	for _, r := range p.rules {
		if len(r.ports) > 0 && !slices.Contains(r.ports, port) {
			continue
		}
		if r.cidr.IsValid() {
			if r.cidr.Contains(addr) {
				return egressDecision{allowed: true, rule: r.name}
			}
			continue
		}
		if name == "" {
			continue
		}
		if portStr == "" {
			portStr = strconv.Itoa(int(port))
		}
		for _, h := range r.hosts {
			if matchHost(h, name, portStr) {
				return egressDecision{allowed: true, rule: r.name}
			}
		}
	}
	if !p.deny {
		return egressDecision{allowed: true, rule: egressRuleDefault}
	}
	if name == "" {
		return egressDecision{rule: egressRuleDefault, reason: fmt.Sprintf(
			"no egress rule allows %s, and the connection names no host that resolves to it (only cidr rules match an address)", dst)}
	}
	return egressDecision{rule: egressRuleDefault, reason: fmt.Sprintf("no egress rule allows %s (%s)", net.JoinHostPort(name, strconv.Itoa(int(port))), dst)}
}

// egressState holds the policy of the configuration in effect, compiled once per configuration.
type egressState struct{ p atomic.Pointer[egressPolicy] }

func (s *egressState) watch(cfg *sidecar.Config, dns []netip.Addr) {
	s.p.Store(compileEgress(cfg.Current().Config, dns))
	cfg.OnChange(func(sn sidecar.Snapshot) { s.p.Store(compileEgress(sn.Config, dns)) })
}

func (s *egressState) current() *egressPolicy { return s.p.Load() }

// verifiedName returns host's name when it resolves to dst (routeName), else "".
func (p *Proxy) verifiedName(host string, dst netip.AddrPort) string {
	if n := p.routeName(host, dst); n != dst.Addr().Unmap().String() {
		return n
	}
	return ""
}

// egressAllowsRequest decides on an HTTP request (or a CONNECT) to dst; when the policy denies it,
// it answers 403 and reports false.
func (p *Proxy) egressAllowsRequest(w http.ResponseWriter, r *http.Request, dst netip.AddrPort, protocol string) bool {
	pol := p.egress.current()
	if pol.open() {
		return true
	}
	name := p.verifiedName(r.Host, dst)
	d := pol.decide(name, dst)
	spanEgress(r, pol, d, protocol)
	if d.allowed && !p.log.Core().Enabled(zap.DebugLevel) {
		telemetry.Default.Egress("allow", d.rule, protocol)
		return true // no audit record to write: spare the allocations
	}
	destination := net.JoinHostPort(cmpOr(name, hostName(r.Host), dst.Addr().Unmap().String()), strconv.Itoa(int(dst.Port())))
	p.auditEgress(pol, d, protocol, destination, dst, r.Method, r.URL.Path)
	if d.allowed || pol.dryRun {
		return true
	}
	w.Header().Set(EgressDeniedHeader, destination)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusForbidden)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": ErrEgressDenied, "destination": destination,
		"address": dst.String(), "rule": d.rule, "reason": "kagenti outbound proxy: " + d.reason})
	return false
}

// tunnelChecked tunnels a redirected connection that is not HTTP to dst when the policy allows it,
// else closes it (TLS after an access_denied alert). prefix is what sniff read.
func (p *Proxy) tunnelChecked(c net.Conn, prefix []byte, dst netip.AddrPort) {
	if pol := p.egress.current(); !pol.open() {
		name, protocol := "", "tcp"
		isTLS := len(prefix) > 0 && prefix[0] == tlsHandshakeRecord
		if isTLS {
			protocol = "tls"
			var sni string
			sni, prefix = readClientHello(c, prefix, p.DetectionTimeout)
			if sni != "" {
				name = p.verifiedName(sni, dst)
			}
		}
		d := pol.decide(name, dst)
		destination := dst.String()
		if name != "" {
			destination = net.JoinHostPort(name, strconv.Itoa(int(dst.Port())))
		}
		p.auditEgress(pol, d, protocol, destination, dst, "", "")
		if !d.allowed && !pol.dryRun {
			if isTLS {
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = c.Write(tlsAccessDenied)
			}
			c.Close()
			return
		}
	}
	if err := tunnel(c, prefix, dst, p.dialer); err != nil {
		p.log.Info("tunnel failed", zap.Stringer("to", dst), zap.Error(err))
	}
}

// silentClientAllowed decides on a redirected connection whose client said nothing within twice
// the detection timeout: it can only be a server-first protocol (or a client that is very late),
// which names no host, so only the address decides. Denied, the caller closes the connection
// without having connected to dst.
func (p *Proxy) silentClientAllowed(c net.Conn, dst netip.AddrPort) bool {
	pol := p.egress.current()
	d := pol.decide("", dst)
	if !d.allowed {
		d.reason += "; the client sent nothing to name it by"
	}
	p.auditEgress(pol, d, "tcp", dst.String(), dst, "", "")
	return d.allowed || pol.dryRun
}

// auditEgress writes the audit record of an egress decision: one JSON line on the sidecar's log
// with the fields of the inbound authorization records, never a token. An allow is recorded at
// debug level, a denial (or a dry run's would-be denial) at info.
func (p *Proxy) auditEgress(pol *egressPolicy, d egressDecision, protocol, destination string, dst netip.AddrPort, method, path string) {
	result := "allow"
	if !d.allowed {
		result = "deny"
	}
	metric := result
	if !d.allowed && pol.dryRun {
		metric = "would_deny"
	}
	telemetry.Default.Egress(metric, d.rule, protocol)
	fields := []zap.Field{
		zap.String("caller", pol.caller),
		zap.String("workload", pol.workload),
		zap.String("destination", destination),
		zap.Stringer("address", dst),
		zap.String("protocol", protocol),
		zap.String("method", method),
		zap.String("path", path),
		zap.String("rule", d.rule),
		zap.String("result", result),
		zap.Bool("dryRun", pol.dryRun),
		zap.String("reason", d.reason),
	}
	switch {
	case d.allowed:
		p.log.Debug("egress allowed", fields...)
	case pol.dryRun:
		p.log.Info("egress would be denied", fields...)
	default:
		p.log.Info("egress denied", fields...)
	}
}

func cmpOr(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

const tlsHandshakeRecord = 0x16

// tlsAccessDenied is a fatal access_denied alert (RFC 8446 §6.2): the client's TLS stack reports
// "access denied" rather than a reset connection.
var tlsAccessDenied = []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 49}

var errHelloRead = errors.New("client hello read")

// readClientHello reads the client's TLS ClientHello, after prefix, and returns its server name
// ("" when it has none or is no ClientHello) and every byte read, to be sent on unchanged. crypto/tls
// parses it: a server handshake over a connection that records what it reads and writes nothing,
// stopped once the hello is parsed.
func readClientHello(c net.Conn, prefix []byte, timeout time.Duration) (string, []byte) {
	var read bytes.Buffer
	read.Write(prefix)
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	var sni string
	hc := &helloConn{Conn: c, r: io.MultiReader(bytes.NewReader(prefix), io.TeeReader(c, &read))}
	_ = tls.Server(hc, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni = h.ServerName
		return nil, errHelloRead
	}}).Handshake()
	return sni, read.Bytes()
}

// helloConn reads what is recorded and writes nothing (the alert crypto/tls sends when
// readClientHello stops it is not the client's business).
type helloConn struct {
	net.Conn
	r io.Reader
}

func (h *helloConn) Read(b []byte) (int, error)       { return h.r.Read(b) }
func (h *helloConn) Write(b []byte) (int, error)      { return len(b), nil }
func (h *helloConn) Close() error                     { return nil }
func (h *helloConn) SetDeadline(time.Time) error      { return nil }
func (h *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (h *helloConn) SetWriteDeadline(time.Time) error { return nil }

// ResolvConfNameServers returns the name servers of a resolv.conf: the pod's DNS, which its
// containers share.
func ResolvConfNameServers(path string) []netip.Addr {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.Addr
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				out = append(out, a.Unmap().WithZone(""))
			}
		}
	}
	return out
}
