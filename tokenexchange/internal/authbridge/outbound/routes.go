package outbound

import (
	"net"
	"strings"

	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// Decision is what the proxy does with one request.
type Decision struct {
	// Exchange is false for a pass-through: the request leaves with its own token.
	Exchange bool
	Target   authconfig.Target
	// Rule is the matching destination rule's host, or "" for the default target.
	Rule string
	// IdP is true for a request to the identity provider, which passes through.
	IdP bool
}

// Decide applies the configuration to a request whose route is chosen by name (routeName: a host
// name its destination address answers to, or that address) on the destination's port port: the
// first route whose host pattern matches decides; a pattern with a port matches only that port.
// With no match, the default target applies when exchange is on. Requests to the identity provider
// (any host:port of its issuer, token, JWKS or registration endpoint, or of the inbound
// validation's issuer and JWKS) pass through untouched: the workload's own calls to the IdP carry
// its own tokens, and this, not an excluded port, keeps them out of the exchange (so an agent may
// serve on the IdP's port, 8080 for both by default).
func Decide(c authconfig.Config, name string, port string) Decision {
	if !c.Exchanges() {
		return Decision{}
	}
	name = hostName(name)
	if isIdPHost(c, net.JoinHostPort(name, port)) {
		return Decision{IdP: true}
	}
	for _, r := range c.Outbound.TokenExchange.Routes {
		if !matchHost(strings.ToLower(r.Host), name, port) {
			continue
		}
		if r.Passthrough {
			return Decision{Rule: r.Host}
		}
		return Decision{Exchange: true, Target: r.Target, Rule: r.Host}
	}
	return Decision{Exchange: true, Target: c.Outbound.TokenExchange.DefaultTarget}
}

// matchHost matches a host pattern, "*" standing for any run of characters, with an optional
// ":port" that must equal port.
func matchHost(pattern, host, port string) bool {
	if i := strings.LastIndexByte(pattern, ':'); i >= 0 {
		if pattern[i+1:] != port {
			return false
		}
		pattern = pattern[:i]
	}
	return glob(pattern, host)
}

// glob matches s against pattern, where '*' matches any run of characters (iteratively, in
// linear time for the patterns of the schema).
func glob(pattern, s string) bool {
	px, sx := 0, 0
	star, mark := -1, 0
	for sx < len(s) {
		switch {
		case px < len(pattern) && pattern[px] == '*':
			star, mark = px, sx
			px++
		case px < len(pattern) && pattern[px] == s[sx]:
			px++
			sx++
		case star >= 0:
			px, mark = star+1, mark+1
			sx = mark
		default:
			return false
		}
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

// isIdPHost reports whether hostport (lower case, host:port) is where one of the identity
// provider's endpoints is served. It runs for every request: string cuts, no URL parsing.
func isIdPHost(c authconfig.Config, hostport string) bool {
	for _, u := range [...]string{
		c.Outbound.TokenExchange.TokenURL, c.IdP.TokenURL, c.IdP.Issuer, c.IdP.JWKSURL,
		c.IdP.RegistrationURL, c.IdP.KeycloakURL, c.Inbound.Validation.Issuer, c.Inbound.Validation.JWKSURL,
	} {
		if u != "" && endpointHost(u) == hostport {
			return true
		}
	}
	return false
}

// endpointHost returns host:port of an http(s) URL, lower case, with the scheme's default port
// when the URL names none.
func endpointHost(u string) string {
	rest, ok := strings.CutPrefix(u, "https://")
	port := "443"
	if !ok {
		rest, _ = strings.CutPrefix(u, "http://")
		port = "80"
	}
	hostport := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		hostport = rest[:i]
	}
	if _, after, found := strings.Cut(hostport, "@"); found { // userinfo is not part of the host
		hostport = after
	}
	hostport = strings.ToLower(hostport)
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	return hostport + ":" + port
}
