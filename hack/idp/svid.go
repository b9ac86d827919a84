package main

import (
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/jwtsvid"
)

const assertionTypeJWT = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// svidAuthenticator accepts a JWT SVID as client assertion (RFC 7523 §2.2) at the token endpoint:
// zitadel's op authenticates token-exchange clients by ID and secret only, so this middleware
// verifies the SVID against the SPIRE trust bundle and hands the request on as the client
// spiffe://… with a secret only the provider knows.
type svidAuthenticator struct {
	bundleFile  string
	trustDomain spiffeid.TrustDomain
	audiences   []string // the issuer and the token endpoint URL
	secret      string
	s           *storage
}

func (a *svidAuthenticator) wrap(tokenPath string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != tokenPath || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		if err := r.ParseForm(); err != nil {
			next.ServeHTTP(w, r)
			return
		}
		cid := r.PostForm.Get("client_id")
		if user, _, ok := r.BasicAuth(); ok && cid == "" {
			cid, _ = url.QueryUnescape(user)
		}
		bound := a.boundClient(cid)
		if r.PostForm.Get("client_assertion_type") != assertionTypeJWT {
			if bound != nil {
				refuse(w, "client "+cid+" authenticates only with a JWT SVID client assertion (token_endpoint_auth_method private_key_jwt)")
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		id, err := a.verify(r.PostForm.Get("client_assertion"))
		if err != nil {
			refuse(w, "JWT SVID client assertion: "+err.Error())
			return
		}
		if bound != nil {
			if id != bound.spiffeID {
				refuse(w, "client "+cid+" is bound to "+bound.spiffeID+", not to the JWT SVID's subject "+id)
				return
			}
			a.s.mu.Lock()
			bound.assertions++
			secret := bound.secret
			a.s.mu.Unlock()
			log.Printf("client %s authenticated with a JWT SVID client assertion of %s", cid, id)
			passOn(w, r, cid, secret, next)
			return
		}
		if cid != "" && cid != id {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":"invalid_client","error_description":%q}`, "client_id does not match the JWT SVID's subject "+id)
			return
		}
		passOn(w, r, id, a.secret, next)
	})
}

// boundClient is the registered client id when it is bound to a SPIFFE ID (private_key_jwt).
func (a *svidAuthenticator) boundClient(id string) *client {
	if id == "" || a.s == nil {
		return nil
	}
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	if c, ok := a.s.clients[id]; ok && c.spiffeID != "" {
		return c
	}
	return nil
}

func refuse(w http.ResponseWriter, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	fmt.Fprintf(w, `{"error":"invalid_client","error_description":%q}`, reason)
}

// passOn hands r to next as client id with secret, without the assertion members.
func passOn(w http.ResponseWriter, r *http.Request, id, secret string, next http.Handler) {
	form := url.Values{}
	for k, v := range r.PostForm {
		if k != "client_assertion" && k != "client_assertion_type" && k != "client_id" && k != "client_secret" {
			form[k] = v
		}
	}
	body := form.Encode()
	r2 := r.Clone(r.Context())
	r2.Body = readCloser{strings.NewReader(body)}
	r2.ContentLength = int64(len(body))
	r2.Header.Set("Content-Length", strconv.Itoa(len(body)))
	r2.Header.Del("Authorization")
	r2.Form, r2.PostForm = nil, nil
	r2.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	next.ServeHTTP(w, r2)
}

// verify checks the SVID's signature against the bundle (re-read each time: SPIRE rotates its
// keys), its expiry and its audience, and returns its SPIFFE ID.
func (a *svidAuthenticator) verify(token string) (string, error) {
	b, err := os.ReadFile(a.bundleFile)
	if err != nil {
		return "", fmt.Errorf("reading the trust bundle: %w", err)
	}
	bundle, err := spiffebundle.Parse(a.trustDomain, b)
	if err != nil {
		return "", fmt.Errorf("parsing the trust bundle: %w", err)
	}
	svid, err := jwtsvid.ParseAndValidate(token, bundle, a.audiences)
	if err != nil {
		return "", err
	}
	return svid.ID.String(), nil
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }
