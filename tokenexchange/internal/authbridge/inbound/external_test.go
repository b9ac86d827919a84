package inbound

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// extServer is an ext_authz server on loopback whose answer a test chooses.
type extServer struct {
	authv3.UnimplementedAuthorizationServer
	addr   string
	checks atomic.Int32
	// answer returns the response (nil: hang until the call is cancelled).
	answer func(*authv3.CheckRequest) *authv3.CheckResponse
	// open counts the server's open connections.
	open atomic.Int32
}

func (s *extServer) Check(ctx context.Context, r *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	s.checks.Add(1)
	resp := s.answer(r)
	if resp == nil {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return resp, nil
}

type countedConn struct {
	net.Conn
	once sync.Once
	open *atomic.Int32
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

type countingListener struct {
	net.Listener
	open *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.open.Add(1)
	return &countedConn{Conn: c, open: l.open}, nil
}

func startExtServer(t testing.TB, answer func(*authv3.CheckRequest) *authv3.CheckResponse) *extServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &extServer{addr: lis.Addr().String(), answer: answer}
	g := grpc.NewServer()
	authv3.RegisterAuthorizationServer(g, s)
	go func() { _ = g.Serve(countingListener{Listener: lis, open: &s.open}) }()
	t.Cleanup(g.Stop)
	return s
}

func allowAll(*authv3.CheckRequest) *authv3.CheckResponse {
	return &authv3.CheckResponse{Status: &status.Status{Code: int32(codes.OK)}}
}

func denyAll(*authv3.CheckRequest) *authv3.CheckResponse {
	return &authv3.CheckResponse{Status: &status.Status{Code: int32(codes.PermissionDenied), Message: "tenant closed"},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{Body: "not today"}}}
}

// withExternal is onlyThroughMiddle with the external authorizer at addr and extra settings.
func withExternal(addr, extra string) string {
	return onlyThroughMiddle + fmt.Sprintf("    external: {address: %q%s}\n", addr, extra)
}

// The rules decide first and their denial is final (the authorizer is not asked); when they allow,
// the external authorizer must allow too, and its denial is the same 403 as a rule's, naming it.
func TestExternalAuthorizerIsAskedAfterTheRulesAllow(t *testing.T) {
	f, logs := observed(t)
	ext := startExtServer(t, denyAll)
	f.withPolicy(withExternal(ext.addr, ""))

	a := f.get("/tasks", f.direct(), nil)
	assert.Equal(t, http.StatusForbidden, a.status, a.text)
	assert.Equal(t, "default", a.body["rule"], "the rules' denial is final")
	assert.Zero(t, ext.checks.Load(), "the external authorizer is not asked when the rules deny")

	a = f.get("/tasks", f.viaMiddle(), nil)
	assert.Equal(t, http.StatusForbidden, a.status, a.text)
	assert.Equal(t, map[string]string{"error": "access_denied", "rule": "external",
		"reason": "external authorizer " + ext.addr + ": denied: tenant closed (not today)"}, a.body)
	assert.Equal(t, "application/json", a.header.Get("Content-Type"))
	assert.Empty(t, a.challenge)
	assert.EqualValues(t, 1, ext.checks.Load())

	denied := logs.FilterMessage("request denied").All()
	require.Len(t, denied, 2)
	fields := denied[1].ContextMap()
	assert.Equal(t, "external", fields["rule"])
	assert.Equal(t, "deny", fields["result"])
	assert.Equal(t, []any{middle, caller}, fields["chain"])
	assert.Equal(t, "/tasks", fields["path"])

	ext.answer = allowAll
	a = f.get("/tasks", f.viaMiddle(), nil)
	assert.Equal(t, http.StatusOK, a.status, a.text)
	assert.Equal(t, "agent: /tasks", a.text)
}

// The authorizer is sent the verified facts, with the JSON-RPC method read from the body.
func TestExternalAuthorizerIsSentTheVerifiedFactsAndTheRPCMethod(t *testing.T) {
	f := newFixture(t)
	got := make(chan *authv3.CheckRequest, 1)
	ext := startExtServer(t, func(r *authv3.CheckRequest) *authv3.CheckResponse { got <- r; return allowAll(r) })
	f.withPolicy(withExternal(ext.addr, ""))
	a := f.do(http.MethodPost, "/", f.viaMiddle(), []byte(`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}`), nil)
	require.Equal(t, http.StatusOK, a.status, a.text)
	var r *authv3.CheckRequest
	select {
	case r = <-got:
	default:
		t.Fatal("the external authorizer was not asked")
	}
	assert.Equal(t, middle, r.GetAttributes().GetSource().GetPrincipal())
	md := r.GetAttributes().GetMetadataContext().GetFilterMetadata()["kagenti.authbridge"].AsMap()
	assert.Equal(t, "message/send", md["rpc_method"])
	assert.Equal(t, "user-1", md["subject"])
	assert.Equal(t, []any{middle, caller}, md["chain"])
	assert.Empty(t, r.GetAttributes().GetRequest().GetHttp().GetHeaders(), "no header (the token) is sent")
}

// dryRun covers the external authorizer too: its denial is logged and the request goes on.
func TestDryRunLogsWhatTheExternalAuthorizerWouldDeny(t *testing.T) {
	f, logs := observed(t)
	ext := startExtServer(t, denyAll)
	f.withPolicy(strings.Replace(withExternal(ext.addr, ""), "authorization:\n", "authorization:\n    dryRun: true\n", 1))
	a := f.get("/tasks", f.viaMiddle(), nil)
	assert.Equal(t, http.StatusOK, a.status, a.text)
	would := logs.FilterMessage("would deny the request").All()
	require.Len(t, would, 1)
	assert.Equal(t, "external", would[0].ContextMap()["rule"])
	assert.Equal(t, true, would[0].ContextMap()["dryRun"])
}

// An authorizer that gives no decision — it hangs past the timeout, answers garbage (an UNKNOWN
// status, no status), or refuses the connection — denies with 403 naming it, and the proxy goes
// on serving; with failOpen each lets the request through, with an audit record that says so.
func TestExternalAuthorizerWithoutADecisionFailsClosedOrOpen(t *testing.T) {
	hang := startExtServer(t, func(*authv3.CheckRequest) *authv3.CheckResponse { return nil })
	unknown := startExtServer(t, func(*authv3.CheckRequest) *authv3.CheckResponse {
		return &authv3.CheckResponse{Status: &status.Status{Code: int32(codes.Unknown), Message: "¯\\_(ツ)_/¯"}}
	})
	noStatus := startExtServer(t, func(*authv3.CheckRequest) *authv3.CheckResponse { return &authv3.CheckResponse{} })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := lis.Addr().String()
	require.NoError(t, lis.Close())

	for _, tc := range []struct{ name, addr, reason string }{
		{"hangs", hang.addr, "no answer within 50ms"},
		{"answers UNKNOWN", unknown.addr, "status Unknown (2) is neither OK nor a denial"},
		{"answers no status", noStatus.addr, "response has no status"},
		{"refuses the connection", refused, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, logs := observed(t)
			f.withPolicy(withExternal(tc.addr, ", timeout: 50ms"))
			a := f.get("/tasks", f.viaMiddle(), nil)
			assert.Equal(t, http.StatusForbidden, a.status, a.text)
			assert.Equal(t, "external", a.body["rule"])
			assert.Contains(t, a.body["reason"], "external authorizer "+tc.addr+": ")
			assert.Contains(t, a.body["reason"], tc.reason)
			assert.Equal(t, http.StatusOK, f.get("/.well-known/agent-card.json", "", nil).status, "the proxy goes on serving")

			f.withPolicy(withExternal(tc.addr, ", timeout: 50ms, failOpen: true"))
			a = f.get("/tasks", f.viaMiddle(), nil)
			assert.Equal(t, http.StatusOK, a.status, a.text)
			open := logs.FilterMessage("request allowed: the external authorizer failed open").All()
			require.Len(t, open, 1)
			assert.Equal(t, zapcore.WarnLevel, open[0].Level)
			assert.Equal(t, "fail_open", open[0].ContextMap()["result"])
			assert.Equal(t, "external", open[0].ContextMap()["rule"])
			assert.Contains(t, open[0].ContextMap()["reason"], tc.reason)
			assert.Contains(t, open[0].ContextMap()["reason"], "(fail open)")
		})
	}
}

// An explicit denial is never turned into an allow by failOpen.
func TestFailOpenDoesNotOverrideAnExternalDenial(t *testing.T) {
	f := newFixture(t)
	ext := startExtServer(t, denyAll)
	f.withPolicy(withExternal(ext.addr, ", failOpen: true"))
	assert.Equal(t, http.StatusForbidden, f.get("/tasks", f.viaMiddle(), nil).status)
}

// The client and its connection live as long as their configuration: a config change closes the
// previous connection (no leak across reloads) and the new one is used.
func TestAConfigChangeClosesTheExternalAuthorizersConnection(t *testing.T) {
	f := newFixture(t)
	first := startExtServer(t, allowAll)
	f.withPolicy(withExternal(first.addr, ""))
	require.Equal(t, http.StatusOK, f.get("/tasks", f.viaMiddle(), nil).status)
	require.EqualValues(t, 1, first.open.Load())

	second := startExtServer(t, denyAll)
	f.withPolicy(withExternal(second.addr, ""))
	assert.Eventually(t, func() bool { return first.open.Load() == 0 }, 10*time.Second, 10*time.Millisecond,
		"the previous configuration's connection is closed")
	assert.Equal(t, http.StatusForbidden, f.get("/tasks", f.viaMiddle(), nil).status, "the new authorizer decides")
	assert.EqualValues(t, 1, first.checks.Load())
	assert.EqualValues(t, 1, second.checks.Load())

	f.withPolicy("inbound: {}\n")
	assert.Eventually(t, func() bool { return second.open.Load() == 0 }, 10*time.Second, 10*time.Millisecond,
		"removing external closes its connection")
	assert.Equal(t, http.StatusOK, f.get("/tasks", f.viaMiddle(), nil).status)
}

// Reloads while requests are being decided: every request gets a decision of one configuration
// or the other, never a closed connection's error. The checks get the longest timeout: a check
// that outlives the default 200 ms on a loaded machine (-race, other suites beside) is a timeout,
// not what this test is about.
func TestReloadsDuringRequestsNeverUseAClosedConnection(t *testing.T) {
	f := newFixture(t)
	a, b := startExtServer(t, allowAll), startExtServer(t, allowAll)
	const slow = ", timeout: 5s"
	f.withPolicy(withExternal(a.addr, slow))
	tok := f.viaMiddle()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Int32
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if got := f.get("/tasks", tok, nil); got.status != http.StatusOK {
					bad.Add(1)
					t.Log(got.status, got.text)
				}
			}
		})
	}
	for i := range 20 {
		f.withPolicy(withExternal([]string{a.addr, b.addr}[i%2], slow))
	}
	close(stop)
	wg.Wait()
	assert.Zero(t, bad.Load())
}
