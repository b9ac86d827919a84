package inbound

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kagenti/platform/pkg/configmap/authz"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

const (
	middle = "spiffe://cluster.local/ns/agents/sa/middle"
	caller = "spiffe://cluster.local/ns/agents/sa/caller"
)

// withPolicy applies config.yaml content to the fixture and checks it was taken.
func (f *fixture) withPolicy(yaml string) {
	f.t.Helper()
	require.NoError(f.t, os.WriteFile(filepath.Join(f.dir, authconfig.ConfigFile), []byte(yaml), 0o644))
	f.cfg.Reload()
	require.NoError(f.t, f.cfg.Err())
}

// viaMiddle is a token of user-1 exchanged by middle for a request of caller (RFC 8693 act).
func (f *fixture) viaMiddle() string {
	return f.token(f.valid(map[string]any{"azp": "agents/middle", "groups": []string{"/staff"},
		"act": map[string]any{"sub": middle, "act": map[string]any{"sub": caller}}}))
}

// direct is a token caller obtained for itself (no act chain).
func (f *fixture) direct() string {
	return f.token(f.valid(map[string]any{"azp": caller}))
}

// do sends a request with body and returns the answer.
func (f *fixture) do(method, path, token string, body []byte, hdr map[string]string) answer {
	f.t.Helper()
	req, err := http.NewRequest(method, f.url+path, bytes.NewReader(body))
	require.NoError(f.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, challenge: resp.Header.Get("WWW-Authenticate"), header: resp.Header, text: string(b)}
	_ = json.Unmarshal(b, &a.body)
	return a
}

const onlyThroughMiddle = `inbound:
  authorization:
    rules:
    - {name: no-guests, effect: Deny, when: '"/guests" in groups'}
    - {name: only-through-middle, effect: Allow, when: 'caller == "` + middle + `"'}
`

// A denied request is answered 403 with the rule that decided, and never reaches the agent; an
// allowed one does. The policy's default (no rule matched) is named "default".
func TestPolicyDeniesWith403NamingTheRule(t *testing.T) {
	f := newFixture(t)
	f.withPolicy(onlyThroughMiddle)

	a := f.get("/tasks", f.viaMiddle(), nil)
	assert.Equal(t, http.StatusOK, a.status, a.text)
	assert.Equal(t, "agent: /tasks", a.text)

	a = f.get("/tasks", f.direct(), nil)
	assert.Equal(t, http.StatusForbidden, a.status, a.text)
	assert.Equal(t, map[string]string{"error": "access_denied", "rule": "default", "reason": "no rule matched; the default denies"}, a.body)
	assert.Empty(t, a.challenge, "the token is valid: no Bearer challenge")
	assert.Equal(t, "application/json", a.header.Get("Content-Type"))
	assert.Empty(t, a.header.Get("X-Seen-URI"), "nothing reached the agent")

	guest := f.token(f.valid(map[string]any{"groups": []string{"/guests"}, "act": map[string]any{"sub": middle}}))
	a = f.get("/tasks", guest, nil)
	assert.Equal(t, http.StatusForbidden, a.status)
	assert.Equal(t, map[string]string{"error": "access_denied", "rule": "no-guests", "reason": `denied by rule "no-guests"`}, a.body,
		"deny overrides the allow that matches too")

	f.withPolicy("inbound: {authorization: {rules: [{name: tenant, effect: Allow, when: 'claims.tenant == \"acme\"'}]}}\n")
	a = f.get("/tasks", f.viaMiddle(), nil)
	assert.Equal(t, http.StatusForbidden, a.status, "a rule that cannot be evaluated denies")
	assert.Equal(t, "tenant", a.body["rule"])
	assert.Contains(t, a.body["reason"], `rule "tenant" could not be evaluated: no such key: tenant`)

	f.withPolicy("inbound: {}\n")
	assert.Equal(t, http.StatusOK, f.get("/tasks", f.direct(), nil).status, "without a policy every valid token is admitted, as before")
}

func observed(t *testing.T) (*fixture, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return newLoggedFixture(t, zap.New(core)), logs
}

// Every denial is an audit record with the verified facts it was made on and never the token.
func TestDenialIsAnAuditRecord(t *testing.T) {
	f, logs := observed(t)
	f.withPolicy(onlyThroughMiddle)
	tok := f.direct()
	require.Equal(t, http.StatusForbidden, f.get("/tasks/1", tok, nil).status)

	denied := logs.FilterMessage("request denied").All()
	require.Len(t, denied, 1)
	fields := denied[0].ContextMap()
	assert.Equal(t, map[string]any{
		"subject": "user-1", "caller": caller, "chain": []any{}, "audience": []any{audience},
		"method": "GET", "path": "/tasks/1", "rpcMethod": "", "peer": "", "rule": "default", "result": "deny", "dryRun": false,
		"reason": "no rule matched; the default denies",
	}, fields)
	assert.Equal(t, zapcore.InfoLevel, denied[0].Level)

	require.Equal(t, http.StatusOK, f.get("/tasks/1", f.viaMiddle(), nil).status)
	allowed := logs.FilterMessage("request allowed").All()
	require.Len(t, allowed, 1, "an allowed request is recorded at debug level")
	assert.Equal(t, zapcore.DebugLevel, allowed[0].Level)
	assert.Equal(t, []any{middle, caller}, allowed[0].ContextMap()["chain"])
	assert.Equal(t, "only-through-middle", allowed[0].ContextMap()["rule"])

	for _, e := range logs.All() {
		for _, v := range e.ContextMap() {
			assert.NotContains(t, toString(v), strings.Split(tok, ".")[2], "a token's signature is never logged")
		}
	}
}

func toString(v any) string { b, _ := json.Marshal(v); return string(b) }

// dryRun: true admits what the policy would deny and records it as such.
func TestDryRunLogsWhatWouldBeDeniedAndAdmitsIt(t *testing.T) {
	f, logs := observed(t)
	f.withPolicy(strings.Replace(onlyThroughMiddle, "authorization:\n", "authorization:\n    dryRun: true\n", 1))
	a := f.get("/tasks", f.direct(), nil)
	assert.Equal(t, http.StatusOK, a.status, a.text)
	assert.Equal(t, "agent: /tasks", a.text)
	would := logs.FilterMessage("would deny the request").All()
	require.Len(t, would, 1)
	assert.Equal(t, "default", would[0].ContextMap()["rule"])
	assert.Equal(t, "deny", would[0].ContextMap()["result"])
	assert.Equal(t, true, would[0].ContextMap()["dryRun"])
	assert.Empty(t, logs.FilterMessage("request denied").All())
}

// A malformed or too deep act chain is an invalid token (401), whatever the policy says.
func TestMalformedOrTooDeepChainIsAnInvalidToken(t *testing.T) {
	f := newFixture(t)
	f.withPolicy("inbound: {authorization: {maxChainDepth: 2}}\n")
	for name, act := range map[string]any{
		"act not an object": "spiffe://x",
		"act without sub":   map[string]any{"client_id": "x"},
		"past the depth":    map[string]any{"sub": "a", "act": map[string]any{"sub": "b", "act": map[string]any{"sub": "c"}}},
	} {
		t.Run(name, func(t *testing.T) {
			a := f.get("/tasks", f.token(f.valid(map[string]any{"act": act})), nil)
			assert.Equal(t, http.StatusUnauthorized, a.status, a.text)
			assert.Equal(t, "invalid_token", a.body["error"])
			assert.Contains(t, a.body["error_description"], "delegation chain: ")
			assert.Contains(t, a.challenge, `error="invalid_token"`)
		})
	}
	assert.Equal(t, http.StatusOK, f.get("/tasks", f.viaMiddle(), nil).status, "a chain of two is at the limit")
}

const readOnly = `inbound:
  authorization:
    rules:
    - {name: read-only, effect: Allow, when: 'request.rpcMethod in ["tasks/get", "tasks/list"]'}
`

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// The JSON-RPC method of an A2A request is read from the body, which reaches the agent unchanged.
func TestRPCMethodIsReadFromTheBodyAndTheBodyKept(t *testing.T) {
	f := newFixture(t)
	f.withPolicy(readOnly)
	get := []byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"t-1"}}`)
	a := f.do(http.MethodPost, "/", f.viaMiddle(), get, map[string]string{"Content-Type": "application/json"})
	require.Equal(t, http.StatusOK, a.status, a.text)
	assert.Equal(t, sum(get), a.header.Get("X-Seen-Body-SHA256"), "the agent reads the body the proxy read")

	send := []byte(`{"jsonrpc":"2.0","id":2,"method":"message/send","params":{"message":{"parts":[]}}}`)
	a = f.do(http.MethodPost, "/", f.viaMiddle(), send, nil)
	assert.Equal(t, http.StatusForbidden, a.status)
	assert.Equal(t, "default", a.body["rule"])

	a = f.do(http.MethodPost, "/upload", f.viaMiddle(), []byte("plain text, not JSON-RPC"), nil)
	assert.Equal(t, http.StatusForbidden, a.status, "a body without a method has rpcMethod \"\"")
}

// A body from which the method cannot be read safely is refused when the policy decides on it,
// so that no body shape lets a request past a rule on request.rpcMethod.
func TestRPCMethodCannotBeHiddenFromThePolicy(t *testing.T) {
	f := newFixture(t)
	f.withPolicy(strings.Replace(readOnly, "    rules:\n", "    rules:\n    - {name: no-send, effect: Deny, when: 'request.rpcMethod == \"message/send\"'}\n", 1))
	padded := append([]byte(`{"jsonrpc":"2.0","method":"tasks/get","params":{"pad":"`), bytes.Repeat([]byte("x"), MaxRPCBody)...)
	padded = append(padded, `"}}`...)
	for name, tc := range map[string]struct {
		body   []byte
		hdr    map[string]string
		status int
		reason string
	}{
		"larger than the bound": {padded, nil, http.StatusRequestEntityTooLarge, "request body larger than 1048576 bytes"},
		"a batch":               {[]byte(`[{"jsonrpc":"2.0","method":"tasks/get"},{"jsonrpc":"2.0","method":"message/send"}]`), nil, http.StatusBadRequest, "batch requests are not accepted"},
		"method twice":          {[]byte(`{"method":"tasks/get","method":"message/send"}`), nil, http.StatusBadRequest, "given twice"},
		"method in upper case":  {[]byte(`{"method":"tasks/get","METHOD":"message/send"}`), nil, http.StatusBadRequest, `given twice or as "METHOD"`},
		"byte-order mark":       {[]byte("\xEF\xBB\xBF{\"method\":\"message/send\"}"), nil, http.StatusBadRequest, "byte-order mark"},
		"utf-16":                {[]byte("{\x00\"\x00m\x00"), nil, http.StatusBadRequest, "UTF-16 or UTF-32"},
		"two values":            {[]byte(`{"method":"tasks/get"} {"method":"message/send"}`), nil, http.StatusBadRequest, "more than one JSON value"},
		"malformed":             {[]byte(`{"method":"tasks/get",`), nil, http.StatusBadRequest, "not a JSON object"},
		"gzip":                  {[]byte("\x1f\x8b"), map[string]string{"Content-Encoding": "gzip"}, http.StatusUnsupportedMediaType, `Content-Encoding "gzip"`},
	} {
		t.Run(name, func(t *testing.T) {
			a := f.do(http.MethodPost, "/", f.viaMiddle(), tc.body, tc.hdr)
			assert.Equal(t, tc.status, a.status, a.text)
			assert.Equal(t, "invalid_request", a.body["error"])
			assert.Contains(t, a.body["error_description"], tc.reason)
			assert.Empty(t, a.header.Get("X-Seen-URI"), "nothing reached the agent")
		})
	}
}

// A policy that does not read request.rpcMethod never reads the body: any size passes.
func TestBodyIsNotReadWithoutARuleOnRPCMethod(t *testing.T) {
	f := newFixture(t)
	f.withPolicy(onlyThroughMiddle)
	big := bytes.Repeat([]byte("["), 2*MaxRPCBody)
	a := f.do(http.MethodPost, "/", f.viaMiddle(), big, nil)
	assert.Equal(t, http.StatusOK, a.status, a.text)
	assert.Equal(t, sum(big), a.header.Get("X-Seen-Body-SHA256"))
}

// In a dry run a body the policy could not read is recorded and forwarded whole.
func TestDryRunForwardsABodyItCouldNotRead(t *testing.T) {
	f, logs := observed(t)
	f.withPolicy(strings.Replace(readOnly, "authorization:\n", "authorization:\n    dryRun: true\n", 1))
	big := append([]byte(`{"method":"tasks/get","pad":"`), bytes.Repeat([]byte("y"), MaxRPCBody+10)...)
	big = append(big, `"}`...)
	a := f.do(http.MethodPost, "/", f.viaMiddle(), big, nil)
	require.Equal(t, http.StatusOK, a.status, a.text)
	assert.Equal(t, sum(big), a.header.Get("X-Seen-Body-SHA256"), "the whole body, the part read and the rest")
	assert.Len(t, logs.FilterMessage("would refuse the request").All(), 1)
	assert.Len(t, logs.FilterMessage("would deny the request").All(), 1, "rpcMethod is then empty: the allow-list would deny")
}

// rpcMethodOf on the shapes of JSON-RPC requests.
func TestRPCMethodOf(t *testing.T) {
	for body, want := range map[string]string{
		``:     "",
		"  \n": "",
		`{"jsonrpc":"2.0","method":"tasks/get","id":1}`:       "tasks/get",
		` {"params":{"method":"x"},"method":"message/send"} `: "message/send",
		`{"method":"\u006dessage/send"}`:                      "message/send",
		`{"method":7}`:                                        "",
		`{"jsonrpc":"2.0"}`:                                   "",
		`"tasks/get"`:                                         "",
		`name=value&method=tasks/get`:                         "",
	} {
		got, err := rpcMethodOf([]byte(body))
		require.NoError(t, err, body)
		assert.Equal(t, want, got, body)
	}
	_, err := rpcMethodOf([]byte("{\"method\":\"tasks/get\xff\"}"))
	assert.ErrorContains(t, err, "not valid UTF-8")
}

// A config.yaml whose policy does not compile is refused as a whole: the policy in effect stays,
// and the error names the rule.
func TestAPolicyThatDoesNotCompileLeavesThePreviousInEffect(t *testing.T) {
	f := newFixture(t)
	f.withPolicy(onlyThroughMiddle)
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, authconfig.ConfigFile),
		[]byte("inbound: {authorization: {rules: [{name: everyone, effect: Allow, when: 'tru'}]}}\n"), 0o644))
	f.cfg.Reload()
	require.Error(t, f.cfg.Err())
	assert.Contains(t, f.cfg.Err().Error(), `inbound.authorization.rules[0].when: rule "everyone" does not compile: 1:1: undeclared reference to 'tru'`)
	a := f.get("/tasks", f.direct(), nil)
	assert.Equal(t, http.StatusForbidden, a.status, "the previous policy still decides")
	assert.Equal(t, "default", a.body["rule"])
}

type failingAuthorizer struct{}

func (failingAuthorizer) Authorize(context.Context, *authz.Request) (authz.Decision, error) {
	return authz.Decision{}, errors.New("authorizer unreachable")
}

// An authorizer that cannot decide (an external one that fails) denies: the proxy fails closed.
func TestAnAuthorizerWithoutADecisionDenies(t *testing.T) {
	f := newFixture(t)
	st := *f.proxy.state.Load()
	st.authz = &authorization{authorizer: failingAuthorizer{}}
	f.proxy.state.Store(&st)
	a := f.get("/tasks", f.viaMiddle(), nil)
	assert.Equal(t, http.StatusForbidden, a.status, a.text)
	assert.Equal(t, map[string]string{"error": "access_denied", "rule": "error", "reason": "no decision: authorizer unreachable"}, a.body)
}

// A gRPC call's body is not read for the method: it is no JSON-RPC, and a stream may stay open.
func TestGRPCBodyIsNotReadForTheMethod(t *testing.T) {
	f := newFixture(t)
	f.withPolicy("inbound: {authorization: {rules: [{name: no-send, effect: Deny, when: 'request.rpcMethod == \"message/send\"'}]}}\n")
	frames := bytes.Repeat([]byte{0, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o'}, MaxRPCBody/5)
	a := f.do(http.MethodPost, "/pkg.Service/Call", f.viaMiddle(), frames, map[string]string{"Content-Type": "application/grpc+proto"})
	assert.Equal(t, http.StatusOK, a.status, a.text)
	assert.Equal(t, sum(frames), a.header.Get("X-Seen-Body-SHA256"))
}
