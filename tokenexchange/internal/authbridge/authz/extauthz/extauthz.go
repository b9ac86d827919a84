// Package extauthz is an authz.Authorizer that asks an external authorizer over Envoy's ext_authz
// gRPC API (envoy.service.auth.v3.Authorization/Check): OPA with its envoy plugin, or any server
// written for Envoy's ext_authz filter.
//
// The CheckRequest carries only verified facts: the request line (method, path, host) and the
// identity read from the verified token. The caller is attributes.source.principal (its SPIFFE ID
// or client id); the subject, caller, delegation chain, scopes, audience and JSON-RPC method are
// in attributes.metadata_context.filter_metadata["kagenti.authbridge"] (typed: lists are lists)
// and, flattened to strings, in attributes.context_extensions. No header of the request is sent:
// a header is what a caller could set, and the Authorization header holds the raw token.
//
// A Check that answers OK allows; PERMISSION_DENIED or UNAUTHENTICATED denies. Anything else (a
// timeout, a refused connection, an unknown status code, a response with no status, an OK that
// carries a denied response) is no decision: the request is denied with a reason naming the
// authorizer (fail closed), or allowed when the admin opted in with FailOpen. An explicit denial
// is never turned into an allow. The server's DeniedHttpResponse (status, headers, body) is not
// passed to the caller: the inbound proxy answers 403 with the decision's reason, so an
// authorizer cannot set headers or a body on the agent's responses; its status message and body
// are in the reason, for the audit record.
package extauthz

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kagenti/platform/pkg/configmap/authz"
)

// DefaultTimeout bounds one Check when Config.Timeout is zero: an authorizer on loopback answers
// in well under a millisecond, so this is a hang, not a slow policy.
const DefaultTimeout = authz.DefaultExternalTimeout

// MetadataNamespace is the filter_metadata key the verified identity is sent under.
const MetadataNamespace = "kagenti.authbridge"

// maxReasonBody bounds how much of a denied response's body goes into a decision's reason.
const maxReasonBody = 256

// Config is an external authorizer.
type Config struct {
	// Address is a gRPC target: host:port, dns:///host:port, or unix:///path.
	Address string
	// Timeout bounds one Check (DefaultTimeout when zero).
	Timeout time.Duration
	// FailOpen allows a request when the authorizer gives no decision. Off by default.
	FailOpen bool
	// TLS is the client TLS configuration (with a certificate for mTLS). Nil means plaintext,
	// which is allowed only to a loopback address or a unix socket: the decision travels on this
	// connection, and anyone on the path of a plaintext one could answer allow.
	TLS *tls.Config
}

// Client is an external authorizer over one gRPC connection, reused for every Check.
type Client struct {
	name     string
	timeout  time.Duration
	failOpen bool
	conn     *grpc.ClientConn
	check    authv3.AuthorizationClient
}

var _ authz.Authorizer = (*Client)(nil)

// New checks cfg and opens the connection (lazily: the first Check dials).
func New(cfg Config) (*Client, error) {
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("external.timeout: %s is negative", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if err := authz.CheckExternalAddress(cfg.Address, cfg.TLS != nil); err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	conn, err := grpc.NewClient(cfg.Address, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("external.address %q: %w", cfg.Address, err)
	}
	return &Client{
		name:     "external authorizer " + cfg.Address,
		timeout:  cfg.Timeout,
		failOpen: cfg.FailOpen,
		conn:     conn,
		check:    authv3.NewAuthorizationClient(conn),
	}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Authorize asks the external authorizer. The Decision is always meaningful: when the authorizer
// gave no decision it is the fail-closed denial (or the fail-open allow), and the error says why.
func (c *Client) Authorize(ctx context.Context, r *authz.Request) (authz.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.check.Check(ctx, CheckRequest(r))
	if err != nil {
		// gRPC's own timer for the deadline can fire before the context's does.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
			err = fmt.Errorf("no answer within %s", c.timeout)
		}
		return c.noDecision(err)
	}
	st := resp.GetStatus()
	if st == nil {
		return c.noDecision(errors.New("response has no status"))
	}
	switch code := codes.Code(st.GetCode()); code {
	case codes.OK:
		if resp.GetDeniedResponse() != nil {
			return c.noDecision(errors.New("status OK with a denied response"))
		}
		return authz.Decision{Allowed: true, Rule: c.name, Reason: c.name + ": allowed"}, nil
	case codes.PermissionDenied, codes.Unauthenticated:
		reason := c.name + ": denied"
		if msg := st.GetMessage(); msg != "" {
			reason += ": " + msg
		}
		if d := resp.GetDeniedResponse(); d != nil && d.GetBody() != "" {
			reason += " (" + truncate(d.GetBody(), maxReasonBody) + ")"
		}
		return authz.Decision{Allowed: false, Rule: c.name, Reason: reason}, nil
	default:
		return c.noDecision(fmt.Errorf("status %s (%d) is neither OK nor a denial", code, st.GetCode()))
	}
}

func (c *Client) noDecision(err error) (authz.Decision, error) {
	err = fmt.Errorf("%s: %w", c.name, err)
	if c.failOpen {
		return authz.Decision{Allowed: true, Rule: c.name, Reason: err.Error() + " (fail open)"}, err
	}
	return authz.Decision{Allowed: false, Rule: c.name, Reason: err.Error()}, err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// CheckRequest is the ext_authz request for r: the request line and the verified identity, in the
// places a policy written for OPA's envoy plugin reads them (input.attributes.request.http,
// input.attributes.source.principal, input.attributes.metadata_context.filter_metadata).
func CheckRequest(r *authz.Request) *authv3.CheckRequest {
	// Path is Envoy's :path, the query included (OPA's envoy plugin parses it into parsed_path
	// and parsed_query); Query repeats the query alone.
	query := ""
	if i := strings.IndexByte(r.Path, '?'); i >= 0 {
		query = r.Path[i+1:]
	}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{
		"subject":    structpb.NewStringValue(r.Subject),
		"caller":     structpb.NewStringValue(r.Caller),
		"chain":      stringList(r.Chain),
		"scopes":     stringList(r.Scopes),
		"audience":   stringList(r.Audience),
		"rpc_method": structpb.NewStringValue(r.RPCMethod),
	}}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Principal: r.Caller},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: r.Method,
			Path:   r.Path,
			Query:  query,
		}},
		ContextExtensions: map[string]string{
			"subject":    r.Subject,
			"caller":     r.Caller,
			"chain":      strings.Join(r.Chain, " "),
			"scopes":     strings.Join(r.Scopes, " "),
			"audience":   strings.Join(r.Audience, " "),
			"rpc_method": r.RPCMethod,
		},
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{MetadataNamespace: md}},
	}}
}

func stringList(ss []string) *structpb.Value {
	vs := make([]*structpb.Value, len(ss))
	for i, s := range ss {
		vs[i] = structpb.NewStringValue(s)
	}
	return structpb.NewListValue(&structpb.ListValue{Values: vs})
}
