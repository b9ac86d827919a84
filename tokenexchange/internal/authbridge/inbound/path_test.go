package inbound

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// raw sends path byte for byte on the request line (an http.Client would escape or reject some of
// the paths under test) and returns the answer.
func (f *fixture) raw(path, token string, hdr http.Header) answer {
	f.t.Helper()
	u, err := url.Parse(f.url)
	require.NoError(f.t, err)
	c, err := net.Dial("tcp", u.Host)
	require.NoError(f.t, err)
	defer c.Close()
	req := "GET " + path + " HTTP/1.1\r\nHost: agent.example\r\nConnection: close\r\n"
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req += k + ": " + v + "\r\n"
		}
	}
	_, err = io.WriteString(c, req+"\r\n")
	require.NoError(f.t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, challenge: resp.Header.Get("WWW-Authenticate"), header: resp.Header, text: string(b)}
	_ = json.Unmarshal(b, &a.body)
	return a
}

// pathCases are the request paths of TestPublicPrefixCannotBeWalkedOutOf, and the fuzzers' seeds:
// the status without a token, and the request URI the agent sees when it is reached.
var pathCases = []struct {
	path   string
	status int
	seen   string // the request URI the agent receives; "" when nothing reaches it
	reason string // part of the 400's error_description
}{
	{"/.well-known/agent.json", 200, "/.well-known/agent.json", ""},
	{"/.well-known/agent-card.json;v=1", 200, "/.well-known/agent-card.json;v=1", ""},
	{"/.well-known/%61gent.json", 200, "/.well-known/%61gent.json", ""},
	{"//.well-known//agent.json", 200, "/.well-known/agent.json", ""},
	{"/../../.well-known/./agent.json", 200, "/.well-known/agent.json", ""},
	{"/x/../healthz", 200, "/healthz", ""},
	{"/.well-known/../admin", 401, "", ""},
	{"/.well-known/%2e%2e/admin", 401, "", ""},
	{"/.well-known/%2E%2E/admin", 401, "", ""},
	{"/.well-known/.%2e/admin", 401, "", ""},
	{"/.well-known/./../admin", 401, "", ""},
	{"/%2e%2e/.well-known/../admin", 401, "", ""},
	{"/healthz/../x", 401, "", ""},
	{"/healthz/.", 401, "", ""},
	{"/healthz;x", 401, "", ""},
	{"/.well-known", 401, "", ""},
	{"/.well-knownx/agent.json", 401, "", ""},
	{"/.well-known/..%2fadmin", 400, "", "encoded slash or backslash (%2f)"},
	{"/.well-known/..%2Fadmin", 400, "", "encoded slash or backslash (%2F)"},
	{"/.well-known/..%5cadmin", 400, "", "encoded slash or backslash (%5c)"},
	{"/.well-known%2fagent.json", 400, "", "encoded slash or backslash"},
	{`/.well-known/..\admin`, 400, "", "backslash"},
	{"/.well-known/..;/admin", 400, "", `dot segment with parameters ("..;")`},
	{"/.well-known/%2e;x/admin", 400, "", "dot segment with parameters"},
	{"/healthz%00", 400, "", "encoded control character (%00)"},
	{"/healthz%7F", 400, "", "encoded control character"},
}

// TestPublicPrefixCannotBeWalkedOutOf: the token-free paths are judged on the path with empty and
// dot segments (plain or percent-encoded, either case) resolved, and that path is the one the agent
// receives; encoded slashes and backslashes, backslashes, control characters and "..;" segments
// are refused, since servers read them differently.
func TestPublicPrefixCannotBeWalkedOutOf(t *testing.T) {
	f := newFixture(t)
	for _, tc := range pathCases {
		t.Run(tc.path, func(t *testing.T) {
			a := f.raw(tc.path, "", nil)
			require.Equal(t, tc.status, a.status, a.text)
			assert.Equal(t, tc.seen, a.header.Get("X-Seen-URI"))
			switch tc.status {
			case http.StatusBadRequest:
				assert.Equal(t, ErrInvalidRequest, a.body["error"])
				assert.Contains(t, a.body["error_description"], tc.reason)
			case http.StatusUnauthorized:
				assert.Equal(t, ErrInvalidRequest, a.body["error"], "no token")
			}
		})
	}
}

// TestAuthenticatedRequestsGetTheCanonicalPath: with a valid token the agent too receives the path
// the proxy normalised, never the one with dot or empty segments.
func TestAuthenticatedRequestsGetTheCanonicalPath(t *testing.T) {
	f := newFixture(t)
	tok := f.token(f.valid(nil))
	for in, want := range map[string]string{
		"/tasks/../admin":           "/admin",
		"//tasks//1/":               "/tasks/1/",
		"/tasks/%2E/1?q=a/../b":     "/tasks/1?q=a/../b",
		"/tasks/a%20b/..":           "/tasks/",
		"/.well-known/../tasks/%41": "/tasks/%41",
	} {
		a := f.raw(in, tok, nil)
		require.Equal(t, http.StatusOK, a.status, "%s: %s", in, a.text)
		assert.Equal(t, want, a.header.Get("X-Seen-URI"), in)
	}
}

// TestPathsPassUnchangedWithoutValidation: with validation off there is no decision to mislead,
// and the proxy forwards the path as it came.
func TestPathsPassUnchangedWithoutValidation(t *testing.T) {
	f := newFixture(t)
	writeConfig(t, f.dir, "inbound: {validation: {enabled: false}}\n")
	f.cfg.Reload()
	require.NoError(t, f.cfg.Err())
	a := f.raw("/a/../b%2fc", "", nil)
	require.Equal(t, http.StatusOK, a.status, a.text)
	assert.Equal(t, "/a/../b%2fc", a.header.Get("X-Seen-URI"))
}

// TestForgedClaimsHeaderIsRemovedInEverySpelling: a client's X-Kagenti-Claims (or X-Forwarded-*)
// never reaches the agent, whatever its case or '_' for '-': CGI-style servers read X_Kagenti_Claims
// as X-Kagenti-Claims.
func TestForgedClaimsHeaderIsRemovedInEverySpelling(t *testing.T) {
	f := newFixture(t)
	forged := http.Header{
		"X_Kagenti_Claims": {"forged"}, "x_kagenti_claims": {"forged"}, "X-KAGENTI_CLAIMS": {"forged"},
		"X-Kagenti-Claims": {"forged"}, "X_Forwarded_For": {"10.6.6.6"}, "X_Forwarded_Host": {"evil"},
		"X-Forwarded_Proto": {"https"}, "X-Kagenti-Claims-Extra": {"kept"},
	}
	tok := f.token(f.valid(nil))
	for _, tc := range []struct{ path, token string }{{"/tasks", tok}, {"/.well-known/agent.json", ""}} {
		a := f.raw(tc.path, tc.token, forged)
		require.Equal(t, http.StatusOK, a.status, a.text)
		var seen []string
		for _, name := range strings.Split(a.header.Get("X-Seen-Headers"), ",") {
			for _, set := range proxySetHeaders {
				if sameHeaderName(name, set) {
					seen = append(seen, name)
				}
			}
		}
		want := []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}
		if tc.token != "" {
			want = append(want, ClaimsHeader)
			assert.Equal(t, strings.Split(tok, ".")[1], a.header.Get("X-Seen-Claims"))
		}
		assert.ElementsMatch(t, want, seen, "only the proxy's own headers, once each (%s)", tc.path)
		assert.Contains(t, a.header.Get("X-Seen-Headers"), "X-Kagenti-Claims-Extra", "other headers are kept")
	}
}

func TestCanonicalPath(t *testing.T) {
	for _, tc := range []struct{ in, raw, decoded, err string }{
		{"/", "/", "/", ""},
		{"/a/b", "/a/b", "/a/b", ""},
		{"/a%20b/c", "/a%20b/c", "/a b/c", ""},
		{"/a/./b/../c/", "/a/c/", "/a/c/", ""},
		{"/a/b/..", "/a/", "/a/", ""},
		{"/a/.", "/a/", "/a/", ""},
		{"/..", "/", "/", ""},
		{"///", "/", "/", ""},
		{"/a/...", "/a/...", "/a/...", ""},
		{"/a/.x/%2ex", "/a/.x/%2ex", "/a/.x/.x", ""},
		{"/a/%2e%2E%2e", "/a/%2e%2E%2e", "/a/...", ""},
		{"/a;p=1/b;q", "/a;p=1/b;q", "/a;p=1/b;q", ""},
		{"/a%3B/..%3B", "/a%3B/..%3B", "/a;/..;", ""}, // an encoded ';' is no parameter
		{"*", "", "", "does not start with /"},
		{"/a%zz", "", "", "invalid percent-encoding at byte 2"},
		{"/a%2", "", "", "invalid percent-encoding"},
		{"/a\x01", "", "", "contains a control character"},
		{"/a%0a", "", "", "encoded control character (%0a)"},
		{"/a/.;x", "", "", "dot segment with parameters"},
		{"/ ", "", "", `contains ' ', which must be percent-encoded`},
		{"/a\xff", "", "", "must be percent-encoded"},
		{"/a?b", "", "", "must be percent-encoded"},
		{"/a[0]", "/a[0]", "/a[0]", ""},
		{"/a!$&'()*+,=:@~", "/a!$&'()*+,=:@~", "/a!$&'()*+,=:@~", ""},
	} {
		raw, decoded, err := canonicalPath(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.raw, raw, tc.in)
		assert.Equal(t, tc.decoded, decoded, tc.in)
	}
}

// FuzzPublicPath: for any request path the proxy accepts, the escaped path it forwards decodes to
// exactly the path it decided on (and is what a URL with both prints); that path has no empty, dot or
// parameterised dot segment, no backslash and no control character; normalising it again changes
// nothing; and a path judged public is still public once path.Clean resolves it.
//
//	go test ./internal/authbridge/inbound -run '^$' -fuzz FuzzPublicPath -fuzztime 60s
func FuzzPublicPath(f *testing.F) {
	for _, tc := range pathCases {
		f.Add(tc.path)
	}
	for _, s := range []string{"/", "/tasks/../admin", "//tasks//1/", "/a%3B/..%3B", "/a/%2e%2E%2e", "*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		raw, decoded, err := canonicalPath(in)
		if err != nil {
			if raw != "" || decoded != "" {
				t.Fatalf("%q refused with a path: %q %q", in, raw, decoded)
			}
			return
		}
		if d, err := url.PathUnescape(raw); err != nil || d != decoded {
			t.Fatalf("%q: forwarded %q decodes to %q (%v), decided on %q", in, raw, d, err, decoded)
		}
		if u := (&url.URL{Path: decoded, RawPath: raw}); u.EscapedPath() != raw {
			t.Fatalf("%q: a URL with path %q and raw path %q forwards %q", in, decoded, raw, u.EscapedPath())
		}
		if !strings.HasPrefix(decoded, "/") || strings.ContainsAny(decoded, "\\\x00\x7f") {
			t.Fatalf("%q: decided on %q", in, decoded)
		}
		for i, s := range strings.Split(raw[1:], "/") {
			name, _, _ := strings.Cut(s, ";")
			if dotSegment(name) != "" || (s == "" && i < strings.Count(raw, "/")-1) {
				t.Fatalf("%q: forwarded %q keeps segment %d %q", in, raw, i, s)
			}
		}
		if r2, d2, err := canonicalPath(raw); err != nil || r2 != raw || d2 != decoded {
			t.Fatalf("%q: normalising %q again gave %q %q %v", in, raw, r2, d2, err)
		}
		if Public(decoded) {
			cleaned := path.Clean(decoded)
			if strings.HasSuffix(decoded, "/") && cleaned != "/" {
				cleaned += "/"
			}
			if !Public(cleaned) {
				t.Fatalf("%q: %q judged public, but resolves to %q", in, decoded, cleaned)
			}
		}
	})
}

// TestRepeatedAuthorizationIsRefused: a request with two Authorization headers (in any case) is
// refused: the proxy would validate the first, and the agent might read the other.
func TestRepeatedAuthorizationIsRefused(t *testing.T) {
	f := newFixture(t)
	tok := f.token(f.valid(nil))
	for _, tc := range []struct {
		path string
		hdr  http.Header
	}{
		{"/tasks", http.Header{"Authorization": {"Bearer forged"}}},
		{"/tasks", http.Header{"authorization": {"Bearer forged"}}},
		{"/.well-known/agent.json", http.Header{"AUTHORIZATION": {"Basic Zm9vOmJhcg=="}}},
	} {
		a := f.raw(tc.path, tok, tc.hdr)
		assert.Equal(t, http.StatusBadRequest, a.status, "%s %v: %s", tc.path, tc.hdr, a.text)
		assert.Equal(t, ErrInvalidRequest, a.body["error"])
		assert.Equal(t, "more than one Authorization header", a.body["error_description"])
		assert.Empty(t, a.header.Get("X-Seen-URI"), "nothing reached the agent")
	}
}
