package register

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
	"os"
	"path/filepath"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idpclient"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
)

// DynamicRegistration registers clients with any provider that implements OAuth 2.0 Dynamic
// Client Registration (RFC 7591), and updates them through its management protocol (RFC 7592)
// when the provider offers it. An initial access token, when the provider requires one, is the
// key initial-access-token of the mounted Secret.
//
// RFC 7591 has no lookup by name: what was registered is remembered in StateFile on the shared
// volume, which lives as long as the pod. A recreated pod registers a new client.
//
// Ownership: RFC 7592 lets only the holder of a client's registration access token read or
// change it, and that token is in StateFile alone. The owner marker is sent as well, as the
// client metadata member kagenti_owner (RFC 7591 §2 lets a provider keep metadata it defines;
// one that does not returns the registered metadata without it), and kept in StateFile: a
// remembered registration made for another owner is neither reused nor updated, and an answer
// whose kagenti_owner names another owner (a provider that hands back an existing client for a
// known client_name) is not used.
type DynamicRegistration struct {
	URL       string
	HTTP      *http.Client
	Admin     AdminCredentials
	StateFile string
}

// metadata is the RFC 7591 §2 client metadata sent.
type metadata struct {
	ClientID                string   `json:"client_id,omitempty"` // RFC 7592 update only
	ClientName              string   `json:"client_name"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	SoftwareID              string   `json:"software_id"`
	// Owner is the owner marker (OwnerOf).
	Owner string `json:"kagenti_owner"`
}

// registration is the RFC 7591 §3.2.1 answer, and what StateFile keeps.
type registration struct {
	ClientID                string `json:"client_id"`
	ClientSecret            string `json:"client_secret"`
	RegistrationAccessToken string `json:"registration_access_token,omitempty"`
	RegistrationClientURI   string `json:"registration_client_uri,omitempty"`
	// Owner is the owner marker: in an answer, what the provider kept ("" when it keeps no
	// kagenti_owner); in StateFile, the owner the client was registered for.
	Owner string `json:"kagenti_owner,omitempty"`
	// Kept in StateFile only: what the client was registered with and where.
	Endpoint     string `json:"kagenti_registration_endpoint,omitempty"`
	MetadataHash string `json:"kagenti_metadata_hash,omitempty"`
}

func metadataFor(c Client) metadata {
	grants := []string{"client_credentials"}
	if c.TokenExchange {
		grants = append(grants, "urn:ietf:params:oauth:grant-type:token-exchange")
	}
	return metadata{ClientName: c.Name, GrantTypes: grants, ResponseTypes: []string{},
		TokenEndpointAuthMethod: "client_secret_basic", SoftwareID: "kagenti-authbridge", Owner: c.Owner}
}

func hashOf(m metadata) string {
	b, _ := json.Marshal(m)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Register reuses the client registered earlier in this pod when its metadata is unchanged,
// updates it (RFC 7592) when it changed, and registers a new one otherwise. A remembered client
// of another owner, or of none, is refused (*ClientOwnedElsewhereError), as is an answer that
// names another owner.
func (d *DynamicRegistration) Register(ctx context.Context, c Client) (Credentials, error) {
	if c.Owner == "" {
		return Credentials{}, errNoOwner
	}
	m := metadataFor(c)
	h := hashOf(m)
	prev, _ := d.load()
	if prev != nil && prev.Endpoint == d.URL && prev.ClientSecret != "" {
		if prev.Owner != c.Owner {
			return Credentials{}, &ClientOwnedElsewhereError{
				Client: fmt.Sprintf("%s registered at %s (remembered in %s)", prev.ClientID, d.URL, d.StateFile), Owner: prev.Owner, Want: c.Owner,
				Adopt: fmt.Sprintf("delete %s (or the pod) to register a new client", d.StateFile),
			}
		}
		if prev.MetadataHash == h {
			return Credentials{ClientID: prev.ClientID, ClientSecret: prev.ClientSecret}, nil
		}
		if prev.RegistrationClientURI != "" && prev.RegistrationAccessToken != "" {
			upd := m
			upd.ClientID = prev.ClientID
			reg, status, err := d.send(ctx, http.MethodPut, prev.RegistrationClientURI, prev.RegistrationAccessToken, upd)
			if err == nil && status == http.StatusOK {
				return d.keep(reg, prev, c.Owner, h)
			}
			// The provider forgot the client or does not manage registrations: register anew.
		}
	}
	iat, err := d.Admin.Read("initial-access-token")
	if err != nil {
		return Credentials{}, err
	}
	reg, status, err := d.send(ctx, http.MethodPost, d.URL, iat, m)
	if err != nil {
		return Credentials{}, err
	}
	if status != http.StatusCreated && status != http.StatusOK {
		return Credentials{}, fmt.Errorf("registering client %q at %s: %d %s", c.Name, d.URL, status, reg.errorText)
	}
	return d.keep(reg, nil, c.Owner, h)
}

// keep stores a successful answer for owner (fields the provider left out keep their previous
// value, as RFC 7592 allows for the secret) and returns its credentials. An answer that names
// another owner is neither stored nor returned.
func (d *DynamicRegistration) keep(r answer, prev *registration, owner, hash string) (Credentials, error) {
	st := r.registration
	if st.Owner != "" && st.Owner != owner {
		return Credentials{}, &ClientOwnedElsewhereError{
			Client: fmt.Sprintf("%s at %s", st.ClientID, d.URL), Owner: st.Owner, Want: owner,
			Adopt: "the provider answered with a client registered for someone else",
		}
	}
	st.Owner = owner
	if prev != nil {
		if st.ClientSecret == "" {
			st.ClientSecret = prev.ClientSecret
		}
		if st.RegistrationAccessToken == "" {
			st.RegistrationAccessToken = prev.RegistrationAccessToken
		}
		if st.RegistrationClientURI == "" {
			st.RegistrationClientURI = prev.RegistrationClientURI
		}
	}
	if st.ClientID == "" || st.ClientSecret == "" {
		return Credentials{}, errors.New("the registration answer has no client_id or client_secret")
	}
	st.Endpoint, st.MetadataHash = d.URL, hash
	b, _ := json.Marshal(st)
	if err := sidecar.WriteFileAtomic(filepath.Dir(d.StateFile), filepath.Base(d.StateFile), b, 0o600); err != nil {
		return Credentials{}, err
	}
	return Credentials{ClientID: st.ClientID, ClientSecret: st.ClientSecret}, nil
}

func (d *DynamicRegistration) load() (*registration, error) {
	b, err := os.ReadFile(d.StateFile)
	if err != nil {
		return nil, err
	}
	var r registration
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// requestFailed describes a request to what that got no answer: what was unreachable, or, when
// ctx ended first (the role stopping, e.g. because its status server could not bind), the request
// was abandoned, for ctx's cause.
func requestFailed(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("request to %s abandoned: %w", what, context.Cause(ctx))
	}
	if re := (*idpclient.RedirectError)(nil); errors.As(err, &re) {
		return fmt.Errorf("%s: %w", what, re)
	}
	return fmt.Errorf("%s unreachable: %w", what, err)
}

type answer struct {
	registration
	errorText string
}

func (d *DynamicRegistration) send(ctx context.Context, method, u, bearer string, m metadata) (answer, int, error) {
	b, _ := json.Marshal(m)
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(b))
	if err != nil {
		return answer{}, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := idpclient.Do(d.HTTP, req)
	if err != nil {
		return answer{}, 0, requestFailed(ctx, "registration endpoint "+u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answer{}, resp.StatusCode, err
	}
	var a answer
	var e idpclient.OAuthError
	_ = json.Unmarshal(body, &a.registration)
	_ = json.Unmarshal(body, &e)
	a.errorText = e.Text(resp.StatusCode)
	return a, resp.StatusCode, nil
}
