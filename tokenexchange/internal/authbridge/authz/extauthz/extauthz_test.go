package extauthz

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/kagenti/platform/pkg/configmap/authz"
)

// fakeServer answers Check with whatever its func returns, and keeps the last request.
type fakeServer struct {
	authv3.UnimplementedAuthorizationServer
	answer func(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error)
	got    chan *authv3.CheckRequest
}

func (f *fakeServer) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	select {
	case f.got <- req:
	default:
	}
	return f.answer(ctx, req)
}

// serve starts f on a loopback port and returns its address.
func serve(t *testing.T, f *fakeServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer()
	if f.got == nil {
		f.got = make(chan *authv3.CheckRequest, 1)
	}
	authv3.RegisterAuthorizationServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func answer(code codes.Code, msg string) func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(code), Message: msg}}, nil
	}
}

func hang(ctx context.Context, _ *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func request() *authz.Request {
	return &authz.Request{
		Subject:   "alice",
		Caller:    "spiffe://example.org/ns/team/sa/planner",
		Chain:     []string{"spiffe://example.org/ns/team/sa/planner", "spiffe://example.org/ns/team/sa/ui"},
		Scopes:    []string{"openid", "weather:read"},
		Audience:  []string{"weather-agent"},
		Method:    "POST",
		Path:      "/a2a?x=1",
		RPCMethod: "message/send",
	}
}

func TestAllowsWhenAuthorizerAnswersOKAndSendsOnlyVerifiedFacts(t *testing.T) {
	f := &fakeServer{answer: answer(codes.OK, "")}
	c := newClient(t, Config{Address: "dns:///" + serve(t, f)})

	d, err := c.Authorize(context.Background(), request())
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Contains(t, d.Rule, "external authorizer")

	req := <-f.got
	a := req.GetAttributes()
	assert.Equal(t, "spiffe://example.org/ns/team/sa/planner", a.GetSource().GetPrincipal())
	assert.Equal(t, "POST", a.GetRequest().GetHttp().GetMethod())
	assert.Equal(t, "/a2a?x=1", a.GetRequest().GetHttp().GetPath())
	assert.Equal(t, "x=1", a.GetRequest().GetHttp().GetQuery())
	assert.Empty(t, a.GetRequest().GetHttp().GetHeaders(), "no header (and so never the raw token) is forwarded")
	md := a.GetMetadataContext().GetFilterMetadata()[MetadataNamespace].AsMap()
	assert.Equal(t, "alice", md["subject"])
	assert.Equal(t, []any{"spiffe://example.org/ns/team/sa/planner", "spiffe://example.org/ns/team/sa/ui"}, md["chain"])
	assert.Equal(t, []any{"openid", "weather:read"}, md["scopes"])
	assert.Equal(t, "message/send", md["rpc_method"])
	assert.Equal(t, "openid weather:read", a.GetContextExtensions()["scopes"])
	assert.Equal(t, "weather-agent", a.GetContextExtensions()["audience"])
}

func TestDeniesWithTheAuthorizersMessageAndBodyInTheReason(t *testing.T) {
	f := &fakeServer{answer: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
		return &authv3.CheckResponse{
			Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: "alice may not send"},
			HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden},
				Body:   "policy weather.deny",
			}},
		}, nil
	}}
	for _, failOpen := range []bool{false, true} {
		c := newClient(t, Config{Address: serve(t, f), FailOpen: failOpen})
		d, err := c.Authorize(context.Background(), request())
		require.NoError(t, err, "a denial is a decision")
		assert.False(t, d.Allowed, "an explicit denial stays a denial, failOpen=%v", failOpen)
		assert.Contains(t, d.Reason, "alice may not send")
		assert.Contains(t, d.Reason, "policy weather.deny")
		assert.Contains(t, d.Reason, "external authorizer")
	}
}

func TestUnauthenticatedIsADenial(t *testing.T) {
	c := newClient(t, Config{Address: serve(t, &fakeServer{answer: answer(codes.Unauthenticated, "")})})
	d, err := c.Authorize(context.Background(), request())
	require.NoError(t, err)
	assert.False(t, d.Allowed)
}

// noDecisionCases are authorizers that give no decision.
func noDecisionCases(t *testing.T) map[string]struct {
	address string
	reason  string
} {
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refusedAddr := refused.Addr().String()
	require.NoError(t, refused.Close())
	return map[string]struct {
		address string
		reason  string
	}{
		"hang":                {serve(t, &fakeServer{answer: hang}), "no answer within"},
		"connection refused":  {refusedAddr, "connection refused"},
		"unknown status code": {serve(t, &fakeServer{answer: answer(codes.Code(99), "")}), "neither OK nor a denial"},
		"internal error code": {serve(t, &fakeServer{answer: answer(codes.Internal, "")}), "neither OK nor a denial"},
		"no status": {serve(t, &fakeServer{answer: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
			return &authv3.CheckResponse{}, nil
		}}), "no status"},
		"OK with a denied response": {serve(t, &fakeServer{answer: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
			return &authv3.CheckResponse{
				Status:       &rpcstatus.Status{Code: int32(codes.OK)},
				HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{}},
			}, nil
		}}), "status OK with a denied response"},
		"server error": {serve(t, &fakeServer{answer: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
			return nil, context.Canceled
		}}), "external authorizer"},
	}
}

func TestNoDecisionFailsClosedWithAReasonNamingTheAuthorizer(t *testing.T) {
	for name, tc := range noDecisionCases(t) {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, Config{Address: tc.address, Timeout: 100 * time.Millisecond})
			d, err := c.Authorize(context.Background(), request())
			require.Error(t, err)
			assert.False(t, d.Allowed)
			assert.Contains(t, d.Reason, "external authorizer "+tc.address)
			assert.Contains(t, d.Reason, tc.reason)
		})
	}
}

func TestFailOpenAllowsWhenTheAuthorizerGivesNoDecision(t *testing.T) {
	for name, tc := range noDecisionCases(t) {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, Config{Address: tc.address, Timeout: 100 * time.Millisecond, FailOpen: true})
			d, err := c.Authorize(context.Background(), request())
			require.Error(t, err, "the error still says the authorizer was not heard")
			assert.True(t, d.Allowed)
			assert.Contains(t, d.Reason, "fail open")
		})
	}
}

func TestOneConnectionServesManyChecks(t *testing.T) {
	var conns int
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	counting := &countingListener{Listener: lis, n: &conns}
	s := grpc.NewServer()
	authv3.RegisterAuthorizationServer(s, &fakeServer{answer: answer(codes.OK, ""), got: make(chan *authv3.CheckRequest, 1)})
	go func() { _ = s.Serve(counting) }()
	t.Cleanup(s.Stop)

	c := newClient(t, Config{Address: lis.Addr().String()})
	for range 20 {
		d, err := c.Authorize(context.Background(), request())
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	s.GracefulStop()
	assert.Equal(t, 1, conns)
}

type countingListener struct {
	net.Listener
	n *int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		*l.n++
	}
	return c, err
}

func TestPlaintextOnlyToLoopbackOrUnixSocket(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:9191", "localhost:9191", "[::1]:9191", "dns:///localhost:9191", "unix:///run/opa.sock"} {
		_, err := New(Config{Address: ok})
		assert.NoError(t, err, ok)
	}
	for _, bad := range []string{"opa.policy.svc:9191", "dns:///opa.policy.svc:9191", "10.0.0.7:9191", "ftp://x:1", "no-port", "dns://8.8.8.8/localhost:9191", "[::ffff:10.0.0.7]:9191"} {
		_, err := New(Config{Address: bad})
		require.Error(t, err, bad)
		assert.True(t, strings.HasPrefix(err.Error(), "external.address"), err.Error())
	}
}

func TestNegativeTimeoutIsRefused(t *testing.T) {
	_, err := New(Config{Address: "127.0.0.1:1", Timeout: -time.Second})
	require.ErrorContains(t, err, "external.timeout")
}

func BenchmarkCheckOnLoopback(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	s := grpc.NewServer()
	authv3.RegisterAuthorizationServer(s, &fakeServer{answer: answer(codes.OK, ""), got: make(chan *authv3.CheckRequest)})
	go func() { _ = s.Serve(lis) }()
	defer s.Stop()
	c, err := New(Config{Address: lis.Addr().String()})
	require.NoError(b, err)
	defer c.Close()
	r := request()
	b.ResetTimer()
	for b.Loop() {
		if d, err := c.Authorize(context.Background(), r); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}
