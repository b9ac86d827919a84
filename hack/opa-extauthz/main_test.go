package main

import (
	"context"
	"os"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
)

func policyServer(t *testing.T) *server {
	t.Helper()
	src, err := os.ReadFile("testdata/policy.rego")
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServer(context.Background(), "testdata/policy.rego", string(src), "data.envoy.authz.allow")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func check(method, path, principal, rpcMethod string, scopes ...string) *authv3.CheckRequest {
	sc := make([]any, len(scopes))
	for i, s := range scopes {
		sc[i] = s
	}
	md, err := structpb.NewStruct(map[string]any{"rpc_method": rpcMethod, "scopes": sc})
	if err != nil {
		panic(err)
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:          &authv3.AttributeContext_Peer{Principal: principal},
		Request:         &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Method: method, Path: path}},
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"kagenti.authbridge": md}},
	}}
}

func TestPolicyDecidesOnTheVerifiedFacts(t *testing.T) {
	s := policyServer(t)
	planner := "spiffe://example.org/ns/team/sa/planner"
	for name, tc := range map[string]struct {
		req  *authv3.CheckRequest
		want codes.Code
	}{
		"planner sends with weather:read": {check("POST", "/a2a", planner, "message/send", "weather:read"), codes.OK},
		"a query string is parsed out":    {check("POST", "/a2a?trace=1", planner, "message/send", "weather:read"), codes.OK},
		"planner without the scope":       {check("POST", "/a2a", planner, "message/send", "openid"), codes.PermissionDenied},
		"another caller":                  {check("POST", "/a2a", "spiffe://example.org/ns/team/sa/other", "message/send", "weather:read"), codes.PermissionDenied},
		"another path":                    {check("POST", "/admin", planner, "message/send", "weather:read"), codes.PermissionDenied},
		"tasks/get is open":               {check("POST", "/a2a", "anyone", "tasks/get"), codes.OK},
	} {
		t.Run(name, func(t *testing.T) {
			resp, err := s.Check(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := codes.Code(resp.GetStatus().GetCode()); got != tc.want {
				t.Fatalf("status %s, want %s (%s)", got, tc.want, resp.GetStatus().GetMessage())
			}
		})
	}
}

func TestDenialCarriesThePolicysReason(t *testing.T) {
	resp, err := policyServer(t).Check(context.Background(), check("GET", "/", "x", ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetStatus().GetMessage(); got != "no rule allows this request" {
		t.Fatalf("reason %q", got)
	}
}

func TestUndefinedOrMistypedDecisionDenies(t *testing.T) {
	for name, src := range map[string]string{
		"undefined": "package envoy.authz\nallow if { false }\n",
		"a string":  "package envoy.authz\nallow := \"yes\"\n",
	} {
		t.Run(name, func(t *testing.T) {
			s, err := newServer(context.Background(), name+".rego", src, "data.envoy.authz.allow")
			if err != nil {
				t.Fatal(err)
			}
			resp, err := s.Check(context.Background(), check("GET", "/", "x", ""))
			if err != nil {
				t.Fatal(err)
			}
			if codes.Code(resp.GetStatus().GetCode()) != codes.PermissionDenied {
				t.Fatalf("status %d, want a denial", resp.GetStatus().GetCode())
			}
		})
	}
}

func TestPolicyThatDoesNotCompileIsRefusedAtStart(t *testing.T) {
	if _, err := newServer(context.Background(), "bad.rego", "package envoy.authz\nallow if {", "data.envoy.authz.allow"); err == nil {
		t.Fatal("want a compile error")
	}
}
