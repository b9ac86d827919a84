// Package idpclient is how the authbridge roles talk to the identity provider (JWKS, token
// endpoint, client registration, Keycloak's admin API). Those requests carry secrets (a client
// secret or assertion, a subject token, an admin password, a registration token), so a redirect
// is never followed: a 307 or 308 would make net/http send the same body, and on the same host the
// same Authorization header, to wherever the Location points.
package idpclient

import (
	"fmt"
	"net/http"
	"time"
)

// Timeout bounds one request to the identity provider, from dial to the end of the body.
const Timeout = 15 * time.Second

// New returns the client for the identity provider: bounded time, the environment's HTTP proxy
// settings honoured, one connection pool shared by the roles of a process, redirects refused.
func New() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 16
	return &http.Client{Transport: t, Timeout: Timeout, CheckRedirect: refuse}
}

// Do sends req with c and never follows a redirect, whatever c's CheckRedirect says: a redirect
// ends in a *RedirectError (wrapped in the *url.Error of net/http) naming where it pointed.
// Every request that carries a secret goes through Do.
func Do(c *http.Client, req *http.Request) (*http.Response, error) {
	if c == nil {
		c = http.DefaultClient
	}
	nc := *c
	nc.CheckRedirect = refuse
	return nc.Do(req)
}

// RedirectError is a redirect the identity provider answered, which was not followed.
type RedirectError struct {
	URL      string // the request's URL
	Status   string // the answer's status, e.g. "307 Temporary Redirect"
	Location string // where it pointed, resolved against URL
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("%s answered %s to %s: redirects from the identity provider are not followed (the request carries credentials)", e.URL, e.Status, e.Location)
}

// refuse is a CheckRedirect that stops at the first redirect with a *RedirectError.
func refuse(next *http.Request, via []*http.Request) error {
	e := &RedirectError{URL: via[len(via)-1].URL.Redacted(), Location: next.URL.Redacted()}
	if next.Response != nil {
		e.Status = next.Response.Status
	}
	return e
}

// OAuthError is the error answer of an OAuth endpoint (RFC 6749 §5.2; RFC 7591 §3.2.2 for
// registration): decode the answer's body into it beside the success fields.
type OAuthError struct {
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description"`
}

// Text is "error (description)" for a failed answer of status, the status text when it named no
// error, and "" for a success that named none.
func (e OAuthError) Text(status int) string {
	t := e.Error
	if e.ErrorDescription != "" {
		t += " (" + e.ErrorDescription + ")"
	}
	if t == "" && status/100 != 2 {
		t = http.StatusText(status)
	}
	return t
}
