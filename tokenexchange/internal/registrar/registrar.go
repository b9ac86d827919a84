// Package registrar registers workloads as OAuth clients of an OpenID provider with no secret
// anywhere (TokenExchange clientRegistration.clientAuthentication jwtSVID): kagenti-tokenexchange
// authenticates its RFC 7591 registration request with its own JWT SVID, and registers each client
// for private_key_jwt authentication bound to the workload's SPIFFE ID, so that the client's only
// credential is that workload's JWT SVID (RFC 7523 client assertion). No admin password, initial
// access token or client secret exists in any namespace.
//
// The provider must accept a JWT SVID as the registration's Bearer and the client metadata member
// spiffe_id; the dev IdP (hack/idp, --registrar) does. The RFC 7592 registration access token in
// the answer is dropped: whoever holds it may change the client, its spiffe_id included.
package registrar

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/jwtsvid"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idpclient"
)

// SVIDSource hands out the controller's JWT SVIDs; go-spiffe's workloadapi.Client is one.
type SVIDSource interface {
	FetchJWTSVID(ctx context.Context, params jwtsvid.Params) (*jwtsvid.SVID, error)
}

// Registrar registers clients, authenticated by the JWT SVIDs of SVIDs.
type Registrar struct {
	SVIDs SVIDSource
	// HTTP is the client for the provider; redirects are refused (idpclient.Do).
	HTTP *http.Client
	// Timeout bounds one registration (the SVID and the request); 0 is 10 seconds.
	Timeout time.Duration
}

// Client is what is registered.
type Client struct {
	// RegistrationURL is the RFC 7591 endpoint; Issuer is the provider's issuer, the audience of
	// the controller's SVID.
	RegistrationURL string
	Issuer          string
	Name            string
	// Owner is the owner marker, namespace/workload, sent as kagenti_owner.
	Owner string
	// SpiffeID is the workload's: only its JWT SVIDs authenticate the client.
	SpiffeID string
	// TokenExchange adds the RFC 8693 grant to client credentials.
	TokenExchange bool
}

// Hash identifies what is registered: the controller registers again only when it changes.
func (c Client) Hash() string {
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// Registered is the provider's answer.
type Registered struct {
	ClientID string
	// Registrar is the SPIFFE ID the registration was authenticated with.
	Registrar string
}

// Failure kinds, for the TokenExchange's ClientRegistered condition.
const (
	// NoSVID: the controller could not get its own JWT SVID.
	NoSVID = "RegistrarUnavailable"
	// Unreachable: the provider did not answer (or redirected).
	Unreachable = "RegistrationFailed"
	// Refused: the provider refused, or answered with what cannot be used.
	Refused = "RegistrationRefused"
)

// Error is a failed registration.
type Error struct {
	Kind string
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// metadata is the RFC 7591 §2 client metadata sent; spiffe_id and kagenti_owner are members the
// provider defines (RFC 7591 §2 allows them).
type metadata struct {
	ClientName              string   `json:"client_name"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	SoftwareID              string   `json:"software_id"`
	SpiffeID                string   `json:"spiffe_id"`
	Owner                   string   `json:"kagenti_owner"`
}

// answer is the part of the RFC 7591 §3.2.1 answer (or §3.2.2 error) that is read.
type answer struct {
	ClientID                string `json:"client_id"`
	ClientSecret            string `json:"client_secret"`
	TokenEndpointAuthMethod string `json:"token_endpoint_auth_method"`
	SpiffeID                string `json:"spiffe_id"`
	Owner                   string `json:"kagenti_owner"`
	idpclient.OAuthError
}

// Register registers c and returns its client ID. An answer that carries a client secret (the
// provider ignored private_key_jwt), or names another SPIFFE ID or owner, is refused and the
// client left unused: the controller never holds a secret.
func (r *Registrar) Register(ctx context.Context, c Client) (Registered, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	if _, err := spiffeid.FromString(c.SpiffeID); err != nil {
		return Registered{}, &Error{Kind: Refused, Err: fmt.Errorf("workload SPIFFE ID %q: %w", c.SpiffeID, err)}
	}
	svid, err := r.SVIDs.FetchJWTSVID(ctx, jwtsvid.Params{Audience: c.Issuer})
	if err != nil {
		return Registered{}, noSVID(c.Issuer, err)
	}
	grants := []string{"client_credentials"}
	if c.TokenExchange {
		grants = append(grants, "urn:ietf:params:oauth:grant-type:token-exchange")
	}
	body, _ := json.Marshal(metadata{ClientName: c.Name, GrantTypes: grants, ResponseTypes: []string{}, TokenEndpointAuthMethod: "private_key_jwt",
		SoftwareID: "kagenti-tokenexchange", SpiffeID: c.SpiffeID, Owner: c.Owner})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.RegistrationURL, bytes.NewReader(body))
	if err != nil {
		return Registered{}, &Error{Kind: Refused, Err: fmt.Errorf("registration URL %q: %w", c.RegistrationURL, err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+svid.Marshal())
	resp, err := idpclient.Do(r.HTTP, req)
	if err != nil {
		return Registered{}, &Error{Kind: Unreachable, Err: fmt.Errorf("registration endpoint %s: %w", c.RegistrationURL, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Registered{}, &Error{Kind: Unreachable, Err: fmt.Errorf("registration endpoint %s: reading the answer: %w", c.RegistrationURL, err)}
	}
	var a answer
	decodeErr := json.Unmarshal(raw, &a)
	refused := func(format string, args ...any) (Registered, error) {
		return Registered{}, &Error{Kind: Refused, Err: fmt.Errorf("registering client %q at %s as %s: "+format,
			append([]any{c.Name, c.RegistrationURL, svid.ID}, args...)...)}
	}
	switch {
	case resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK:
		why := a.Text(resp.StatusCode)
		if resp.StatusCode >= 500 {
			return Registered{}, &Error{Kind: Unreachable, Err: fmt.Errorf("registering client %q at %s: %d %s", c.Name, c.RegistrationURL, resp.StatusCode, why)}
		}
		return refused("%d %s", resp.StatusCode, why)
	case decodeErr != nil:
		return refused("the answer is not JSON: %v", decodeErr)
	case a.ClientID == "":
		return refused("the answer has no client_id")
	case a.ClientSecret != "":
		return refused("the provider issued client %s a client secret: it does not support private_key_jwt clients bound to a SPIFFE ID (spiffe_id); the secret was discarded, use clientAuthentication clientSecret with this provider", a.ClientID)
	case a.TokenEndpointAuthMethod != "" && a.TokenEndpointAuthMethod != "private_key_jwt":
		return refused("the provider registered client %s for %s, not private_key_jwt", a.ClientID, a.TokenEndpointAuthMethod)
	case a.SpiffeID != "" && a.SpiffeID != c.SpiffeID:
		return refused("the provider bound client %s to %s, not %s", a.ClientID, a.SpiffeID, c.SpiffeID)
	case a.Owner != "" && a.Owner != c.Owner:
		return refused("the provider answered with client %s of workload %s, not %s", a.ClientID, a.Owner, c.Owner)
	}
	return Registered{ClientID: a.ClientID, Registrar: svid.ID.String()}, nil
}

// Whoami returns the SPIFFE ID of the controller's JWT SVID for audience.
func (r *Registrar) Whoami(ctx context.Context, audience string) (spiffeid.ID, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	svid, err := r.SVIDs.FetchJWTSVID(ctx, jwtsvid.Params{Audience: audience})
	if err != nil {
		return spiffeid.ID{}, noSVID(audience, err)
	}
	return svid.ID, nil
}

func noSVID(audience string, err error) error {
	return &Error{Kind: NoSVID, Err: fmt.Errorf("kagenti-tokenexchange's JWT SVID for audience %s from the SPIRE agent: %w (is there a registration entry for its service account?)", audience, err)}
}

func (r *Registrar) timeout() time.Duration {
	if r.Timeout <= 0 {
		return 10 * time.Second
	}
	return r.Timeout
}

// KindOf returns the failure kind of err (Unreachable for an error of no kind).
func KindOf(err error) string {
	if e := (*Error)(nil); errors.As(err, &e) {
		return e.Kind
	}
	return Unreachable
}
