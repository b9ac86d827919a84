package main

import (
	"encoding/json"
	"log"
	"net/http"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// registrationHandler implements RFC 7591 dynamic client registration at /register and the
// RFC 7592 update at /register/{client_id}.
type registrationHandler struct {
	s            *storage
	issuer       string
	initialToken string // required as Bearer when set
	// registrars, when set, are the SPIFFE IDs allowed to register: the Bearer must be a JWT SVID
	// of one of them (verified by verifySVID against the trust bundle); no shared secret exists.
	registrars []string
	verifySVID func(token string) (string, error)
}

type clientMetadata struct {
	ClientID                string   `json:"client_id,omitempty"`
	ClientName              string   `json:"client_name"`
	GrantTypes              []string `json:"grant_types"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method,omitempty"`
	// Owner is kagenti-authbridge's owner marker, a metadata member of its own (RFC 7591 §2 lets
	// a server keep the members it knows): kept, and returned with the client, so that the
	// registrant can check whose client an answer describes.
	Owner string `json:"kagenti_owner,omitempty"`
	// SPIFFEID binds a private_key_jwt client to a workload: its client assertions must be JWT
	// SVIDs with this subject.
	SPIFFEID string `json:"spiffe_id,omitempty"`
}

func (h *registrationHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	var m clientMetadata
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&m); err != nil {
		writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", err.Error())
		return
	}
	grants := []oidc.GrantType{}
	for _, g := range m.GrantTypes {
		switch oidc.GrantType(g) {
		case oidc.GrantTypeClientCredentials, oidc.GrantTypeTokenExchange:
			grants = append(grants, oidc.GrantType(g))
		default:
			writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", "unsupported grant type "+g)
			return
		}
	}
	switch m.TokenEndpointAuthMethod {
	case "", "client_secret_basic":
		if m.SPIFFEID != "" {
			writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", "spiffe_id requires token_endpoint_auth_method private_key_jwt")
			return
		}
	case "private_key_jwt":
		if h.verifySVID == nil {
			writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", "token_endpoint_auth_method private_key_jwt needs a SPIFFE trust bundle (--spiffe-bundle)")
			return
		}
		if _, err := spiffeid.FromString(m.SPIFFEID); err != nil {
			writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", "spiffe_id: "+err.Error())
			return
		}
	default:
		writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", "token_endpoint_auth_method must be client_secret_basic or private_key_jwt")
		return
	}
	bearer := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/register":
		if len(h.registrars) > 0 {
			if reason := h.registrarRefusal(bearer); reason != "" {
				writeOAuthError(w, http.StatusUnauthorized, "invalid_token", reason)
				return
			}
		} else if h.initialToken != "" && bearer != h.initialToken {
			writeOAuthError(w, http.StatusUnauthorized, "invalid_token", "an initial access token is required")
			return
		}
		c := &client{id: "dyn-" + randomID(8), secret: randomID(24), name: m.ClientName, grants: grants, regToken: randomID(24), owner: m.Owner, spiffeID: m.SPIFFEID}
		h.s.addClient(c)
		log.Printf("registered client %s (%q, owner %q, spiffe_id %q)", c.id, c.name, c.owner, c.spiffeID)
		w.WriteHeader(http.StatusCreated)
		h.answer(w, c, true)
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/register/"):
		id := strings.TrimPrefix(r.URL.Path, "/register/")
		c, err := h.s.client(id)
		if err != nil || c.regToken == "" || bearer != c.regToken || m.ClientID != id {
			writeOAuthError(w, http.StatusUnauthorized, "invalid_token", "unknown client or registration access token")
			return
		}
		h.s.mu.Lock()
		c.name, c.grants, c.owner, c.spiffeID = m.ClientName, grants, m.Owner, m.SPIFFEID
		h.s.mu.Unlock()
		h.answer(w, c, false)
	default:
		writeOAuthError(w, http.StatusMethodNotAllowed, "invalid_request", "POST /register or PUT /register/{client_id}")
	}
}

// registrarRefusal says why bearer is not a JWT SVID of an allowed registrar ("" when it is).
func (h *registrationHandler) registrarRefusal(bearer string) string {
	if h.verifySVID == nil {
		return "registration by SPIFFE ID needs a SPIFFE trust bundle (--spiffe-bundle)"
	}
	id, err := h.verifySVID(bearer)
	if err != nil {
		return "registrar JWT SVID: " + err.Error()
	}
	if !slices.Contains(h.registrars, id) {
		return "SPIFFE ID " + id + " is not an allowed registrar"
	}
	return ""
}

func (h *registrationHandler) answer(w http.ResponseWriter, c *client, withSecret bool) {
	method := "client_secret_basic"
	if c.spiffeID != "" {
		method, withSecret = "private_key_jwt", false
	}
	out := map[string]any{
		"client_id": c.id, "client_name": c.name, "grant_types": c.grants, "token_endpoint_auth_method": method,
		"registration_access_token": c.regToken, "registration_client_uri": h.issuer + "/register/" + c.id,
	}
	if c.owner != "" {
		out["kagenti_owner"] = c.owner
	}
	if c.spiffeID != "" {
		out["spiffe_id"] = c.spiffeID
	}
	if withSecret {
		out["client_secret"], out["client_secret_expires_at"] = c.secret, 0
	}
	_ = json.NewEncoder(w).Encode(out)
}

func writeOAuthError(w http.ResponseWriter, status int, code, description string) {
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": description})
}
