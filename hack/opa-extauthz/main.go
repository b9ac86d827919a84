// Command kagenti-opa-extauthz is an Envoy ext_authz gRPC server (envoy.service.auth.v3) that
// decides with a Rego policy evaluated through OPA's Go API. The policy sees the CheckRequest as
// OPA's envoy plugin presents it (input.attributes…, input.parsed_path, input.parsed_query), so a
// policy written for that plugin runs here unchanged as long as it reads no request headers (the
// authbridge sends none). The query's result is a boolean (allow) or an object with a boolean
// "allowed" and an optional "reason" string.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/open-policy-agent/opa/v1/rego"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
)

func main() {
	var addr, policy, query string
	flag.StringVar(&addr, "addr", "127.0.0.1:9191", "gRPC listen address")
	flag.StringVar(&policy, "policy", "", "Rego policy file (required)")
	flag.StringVar(&query, "query", "data.envoy.authz.allow", "the decision: a boolean, or an object with allowed and reason")
	flag.Parse()
	if err := run(addr, policy, query); err != nil {
		log.Fatal(err)
	}
}

func run(addr, policy, query string) error {
	if policy == "" {
		return errors.New("--policy: a Rego file is required")
	}
	src, err := os.ReadFile(policy)
	if err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := newServer(ctx, policy, string(src), query)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	authv3.RegisterAuthorizationServer(g, srv)
	go func() {
		<-ctx.Done()
		g.GracefulStop()
	}()
	log.Printf("kagenti-opa-extauthz listening on %s, %s from %s", ln.Addr(), query, policy)
	return g.Serve(ln)
}

type server struct {
	authv3.UnimplementedAuthorizationServer
	query rego.PreparedEvalQuery
}

// newServer compiles the policy once; a policy that does not compile is refused at start.
func newServer(ctx context.Context, name, src, query string) (*server, error) {
	pq, err := rego.New(rego.Query(query), rego.Module(name, src)).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", name, err)
	}
	return &server{query: pq}, nil
}

// Check evaluates the policy on the request. An evaluation error or an undefined decision
// denies: this server fails closed too.
func (s *server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	input, err := inputOf(req)
	if err != nil {
		return deny(codes.PermissionDenied, "input: "+err.Error()), nil
	}
	rs, err := s.query.Eval(ctx, rego.EvalInput(input))
	if err != nil {
		return deny(codes.PermissionDenied, "policy: "+err.Error()), nil
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return deny(codes.PermissionDenied, "policy: decision undefined"), nil
	}
	allowed, reason := decision(rs[0].Expressions[0].Value)
	if !allowed {
		return deny(codes.PermissionDenied, reason), nil
	}
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
	}, nil
}

func deny(code codes.Code, reason string) *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(code), Message: reason},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{Body: reason}},
	}
}

// decision reads a boolean, or an object {allowed: bool, reason: string}.
func decision(v any) (bool, string) {
	switch v := v.(type) {
	case bool:
		return v, "policy denied"
	case map[string]any:
		allowed, _ := v["allowed"].(bool)
		reason, _ := v["reason"].(string)
		if reason == "" {
			reason = "policy denied"
		}
		return allowed, reason
	default:
		return false, fmt.Sprintf("policy: decision is a %T, not a boolean or an object", v)
	}
}

// inputOf is the CheckRequest as JSON (protobuf field names, as OPA's envoy plugin), with the
// path split into parsed_path and parsed_query.
func inputOf(req *authv3.CheckRequest) (map[string]any, error) {
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(req)
	if err != nil {
		return nil, err
	}
	var input map[string]any
	if err := json.Unmarshal(raw, &input); err != nil {
		return nil, err
	}
	u, err := url.ParseRequestURI(req.GetAttributes().GetRequest().GetHttp().GetPath())
	if err != nil {
		input["parsed_path"] = []any{}
		input["parsed_query"] = map[string]any{}
		return input, nil
	}
	parts := []any{}
	for _, p := range strings.Split(strings.TrimPrefix(u.Path, "/"), "/") {
		parts = append(parts, p)
	}
	q := map[string]any{}
	for k, vs := range u.Query() {
		l := make([]any, len(vs))
		for i, v := range vs {
			l[i] = v
		}
		q[k] = l
	}
	input["parsed_path"], input["parsed_query"] = parts, q
	return input, nil
}
