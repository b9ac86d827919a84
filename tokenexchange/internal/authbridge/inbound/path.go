package inbound

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Unauthenticated paths: discovery documents (the A2A agent card) and health checks reach the
// agent without a token. They are compared with the canonical, decoded path (canonicalPath).
var (
	publicPrefixes = []string{"/.well-known/"}
	publicPaths    = []string{"/healthz", "/readyz", "/livez", "/health"}
)

// Public reports whether path, a canonical decoded path (canonicalPath), is served without a token.
func Public(path string) bool {
	for _, p := range publicPrefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	for _, p := range publicPaths {
		if path == p {
			return true
		}
	}
	return false
}

// canonicalPath turns the escaped path of a request into the one the proxy decides on and forwards
// (as Envoy's normalize_path and merge_slashes do): empty segments are merged, "." and ".."
// segments, plain or percent-encoded, are resolved (RFC 3986 §5.2.4, never above the root), and
// the rest is kept byte for byte. It returns that path escaped (to forward) and decoded (to decide
// on); the one is exactly the percent-decoding of the other, so the agent resolves the path the
// proxy judged. What no normalisation can make unambiguous is refused: an encoded slash or
// backslash (servers disagree on whether it separates segments), a backslash (some read it as a
// slash), control characters (%00 ends a string in C), and a dot segment with parameters ("..;x",
// which servlet containers resolve as "..").
func canonicalPath(escaped string) (raw, decoded string, err error) {
	if !strings.HasPrefix(escaped, "/") {
		return "", "", fmt.Errorf("request path %q does not start with /", escaped)
	}
	if err := checkPathBytes(escaped); err != nil {
		return "", "", err
	}
	if !needsNormalising(escaped) {
		d, err := url.PathUnescape(escaped)
		if err != nil {
			return "", "", fmt.Errorf("request path %q: %w", escaped, err)
		}
		return escaped, d, nil
	}
	segments := strings.Split(escaped[1:], "/")
	out := make([]string, 0, len(segments))
	trailing := false
	for _, s := range segments {
		trailing = false
		name, _, params := strings.Cut(s, ";")
		dot := dotSegment(name)
		switch {
		case dot != "" && params:
			return "", "", fmt.Errorf("request path %q has a dot segment with parameters (%q)", escaped, s)
		case dot == "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = true
		case dot == "." || s == "":
			trailing = true
		default:
			out = append(out, s)
		}
	}
	raw = "/" + strings.Join(out, "/")
	if trailing && len(out) > 0 {
		raw += "/"
	}
	decoded, err = url.PathUnescape(raw)
	if err != nil {
		return "", "", fmt.Errorf("request path %q: %w", escaped, err)
	}
	return raw, decoded, nil
}

// checkPathBytes refuses backslashes, control characters, other bytes that an escaped path never
// holds unencoded, and encoded slashes, backslashes and control characters, in either case of hex
// digit.
func checkPathBytes(escaped string) error {
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		switch {
		case c == '\\':
			return fmt.Errorf("request path %q contains a backslash", escaped)
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("request path %q contains a control character", escaped)
		case !pathByte(c):
			return fmt.Errorf("request path %q contains %q, which must be percent-encoded", escaped, c)
		case c == '%':
			if i+2 >= len(escaped) || !isHex(escaped[i+1]) || !isHex(escaped[i+2]) {
				return fmt.Errorf("request path %q has an invalid percent-encoding at byte %d", escaped, i)
			}
			switch b := unhex(escaped[i+1])<<4 | unhex(escaped[i+2]); {
			case b == '/' || b == '\\':
				return fmt.Errorf("request path %q contains an encoded slash or backslash (%s)", escaped, escaped[i:i+3])
			case b < 0x20 || b == 0x7f:
				return fmt.Errorf("request path %q contains an encoded control character (%s)", escaped, escaped[i:i+3])
			}
			i += 2
		}
	}
	return nil
}

// needsNormalising reports whether escaped may have an empty or a dot segment: it has "//" or a
// segment that starts with '.' or '%' (an encoded dot). Most paths have neither and are taken as
// they are, without allocating.
func needsNormalising(escaped string) bool {
	for i := 0; i < len(escaped); i++ {
		if escaped[i] != '/' {
			continue
		}
		if i+1 == len(escaped) {
			return false
		}
		if c := escaped[i+1]; c == '/' || c == '.' || c == '%' {
			return true
		}
	}
	return false
}

// dotSegment returns "." or ".." when the escaped segment name is one (with '.' written plainly or
// as %2e/%2E), else "".
func dotSegment(name string) string {
	dots := 0
	for i := 0; i < len(name); i++ {
		switch {
		case name[i] == '.':
		case name[i] == '%' && i+2 < len(name) && name[i+1] == '2' && (name[i+2] == 'e' || name[i+2] == 'E'):
			i += 2
		default:
			return ""
		}
		dots++
		if dots > 2 {
			return ""
		}
	}
	return [...]string{"", ".", ".."}[dots]
}

// pathByte reports whether c may appear unencoded in an escaped path: what RFC 3986 allows in a
// segment, '/', '%', and the '[' and ']' that Go's URL parser keeps as they came.
func pathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/%[]", c) >= 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// proxySetHeaders are the request headers the agent receives from the proxy and may trust: the
// validated claims and the X-Forwarded-* the reverse proxy sets. A client's own copy is removed in
// every spelling a server could read as one of them (removeSpellings).
var proxySetHeaders = []string{ClaimsHeader, "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"}

// removeSpellings deletes every header of h whose name is one of names once case is folded and '_'
// is read as '-': CGI turns both X-Kagenti-Claims and X_Kagenti_Claims into HTTP_X_KAGENTI_CLAIMS,
// and the servers built on its convention (WSGI, Rack, PHP) read either as the real one, while Go's
// http.Header keeps X_Kagenti_Claims apart from X-Kagenti-Claims.
func removeSpellings(h http.Header, names []string) {
	for k := range h {
		for _, n := range names {
			if sameHeaderName(k, n) {
				delete(h, k)
				break
			}
		}
	}
}

// sameHeaderName compares header names with case folded and '_' read as '-'.
func sameHeaderName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if foldHeaderByte(a[i]) != foldHeaderByte(b[i]) {
			return false
		}
	}
	return true
}

func foldHeaderByte(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}
