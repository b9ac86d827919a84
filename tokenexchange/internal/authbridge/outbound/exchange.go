package outbound

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idpclient"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/telemetry"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing"
)

// RFC 8693 and RFC 7523 identifiers.
const (
	GrantTokenExchange   = "urn:ietf:params:oauth:grant-type:token-exchange"
	TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
	TokenTypeJWT         = "urn:ietf:params:oauth:token-type:jwt"
	AssertionTypeJWT     = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
)

// Credentials authenticate the workload at the token endpoint: a client ID and secret
// (client_secret_basic), or a JWT SVID presented as a client assertion (RFC 7523 §2.2).
type Credentials struct {
	ClientID     string
	ClientSecret string
	Assertion    string
	// ActorToken is the workload's JWT SVID sent as RFC 8693 actor_token, so that the identity
	// provider names the workload in the exchanged token's act (and nests the caller's chain).
	ActorToken string
}

// key identifies the credentials in cache keys without holding the secret.
func (c Credentials) key() string {
	h := sha256.Sum256([]byte(c.ClientID + "\x00" + c.ClientSecret + "\x00" + c.Assertion + "\x00" + c.ActorToken))
	return hex.EncodeToString(h[:8])
}

// ExchangeError is a failed exchange, with the status the proxy answers the caller.
type ExchangeError struct {
	// Status is 502 when the identity provider is unreachable, failing, or refuses the workload's
	// own credentials; 403 when it refuses to exchange the caller's token.
	Status      int
	Code        string // the provider's OAuth error code, when it gave one
	Description string
}

func (e *ExchangeError) Error() string { return e.Description }

// Exchanger exchanges tokens at the token endpoint and caches the results until shortly before
// they expire. Safe for concurrent use.
type Exchanger struct {
	Client *http.Client
	Now    func() time.Time
	// MaxEntries bounds the cache.
	MaxEntries int
	// Tracing, when set, exports a span of every exchange.
	Tracing *tracing.Tracing

	group singleflight.Group
	mu    sync.Mutex
	cache map[string]cached
	stats Stats
}

type cached struct {
	token   string
	expires time.Time // when the entry stops being served
}

// Stats counts cache use, for the benchmarks and the logs.
type Stats struct{ Hits, Misses, Failures uint64 }

// NewExchanger returns an exchanger using client.
func NewExchanger(client *http.Client) *Exchanger {
	return &Exchanger{Client: client, Now: time.Now, MaxEntries: 10000, cache: map[string]cached{}}
}

// Request is one exchange.
type Request struct {
	TokenURL     string
	SubjectToken string
	Audience     string
	Scopes       []string
	Credentials  Credentials
}

func (r Request) cacheKey() string {
	h := sha256.Sum256([]byte(r.SubjectToken))
	return strings.Join([]string{hex.EncodeToString(h[:]), r.TokenURL, r.Audience, strings.Join(r.Scopes, " "), r.Credentials.key()}, "\x00")
}

// Exchange returns a token for r's audience and scopes, from the cache when one is valid long
// enough. Concurrent identical requests share one call to the provider.
func (e *Exchanger) Exchange(ctx context.Context, r Request) (string, error) {
	key := r.cacheKey()
	now := e.Now()
	e.mu.Lock()
	tracer := e.Tracing.Outbound()
	if c, ok := e.cache[key]; ok && now.Before(c.expires) {
		e.stats.Hits++
		e.mu.Unlock()
		telemetry.Default.Exchange(true, 0, nil)
		if tracer != nil {
			// INTERNAL: nothing left the process.
			_, span := tracer.Start(ctx, tracing.SpanExchange, trace.WithSpanKind(trace.SpanKindInternal),
				trace.WithAttributes(tracing.KeyExchangeAudience.String(r.Audience), tracing.KeyExchangeResult.String("cached")))
			span.End()
		}
		return c.token, nil
	}
	e.stats.Misses++
	e.mu.Unlock()
	if tracer != nil {
		// CLIENT: a call to the identity provider's token endpoint (this request's own, or one
		// it shares with concurrent identical requests: kagenti.exchange.shared).
		var span trace.Span
		ctx, span = tracer.Start(ctx, tracing.SpanExchange, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(tracing.KeyExchangeAudience.String(r.Audience)))
		defer span.End()
		if u, err := url.Parse(r.TokenURL); err == nil && span.IsRecording() {
			span.SetAttributes(tracing.KeyServerAddr.String(u.Hostname()))
		}
		ctx = withExchangeSpan(ctx, span)
	}
	v, err, shared := e.group.Do(key, func() (any, error) {
		start := time.Now()
		tok, lifetime, err := e.call(ctx, r)
		telemetry.Default.Exchange(false, time.Since(start), err)
		if err != nil {
			return "", err
		}
		e.store(key, tok, e.cacheUntil(now, lifetime, r.SubjectToken))
		return tok, nil
	})
	spanExchanged(ctx, err, shared)
	if err != nil {
		e.mu.Lock()
		e.stats.Failures++
		e.mu.Unlock()
		return "", err
	}
	return v.(string), nil
}

type exchangeSpanKey struct{}

func withExchangeSpan(ctx context.Context, span trace.Span) context.Context {
	return context.WithValue(ctx, exchangeSpanKey{}, span)
}

// spanExchanged records an exchange's result on its span: issued, or failed with the identity
// provider's OAuth error code (never its description, nor a token).
func spanExchanged(ctx context.Context, err error, shared bool) {
	span, ok := ctx.Value(exchangeSpanKey{}).(trace.Span)
	if !ok || !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.KeyExchangeShared.Bool(shared))
	if err == nil {
		span.SetAttributes(tracing.KeyExchangeResult.String("issued"))
		return
	}
	code := "exchange_failed"
	if xe := (*ExchangeError)(nil); errors.As(err, &xe) && xe.Code != "" {
		code = xe.Code
	}
	span.SetAttributes(tracing.KeyExchangeResult.String("failed"), tracing.KeyExchangeError.String(code))
	span.SetStatus(codes.Error, code)
}

// Stats returns the counters so far.
func (e *Exchanger) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// cacheUntil is when an exchanged token stops being served: a margin before it expires (a tenth
// of its lifetime, between 5 and 30 seconds), and never after the subject token expires.
func (e *Exchanger) cacheUntil(issued time.Time, lifetime time.Duration, subject string) time.Time {
	margin := min(max(lifetime/10, 5*time.Second), 30*time.Second)
	until := issued.Add(lifetime - margin)
	if exp, ok := jwtExpiry(subject); ok && exp.Before(until) {
		until = exp
	}
	return until
}

func (e *Exchanger) store(key, token string, until time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.Now()
	if !until.After(now) {
		return
	}
	if len(e.cache) >= e.MaxEntries {
		for k, c := range e.cache {
			if !now.Before(c.expires) {
				delete(e.cache, k)
			}
		}
	}
	if len(e.cache) >= e.MaxEntries {
		// Still full of live entries: drop the one that expires first.
		var first string
		var at time.Time
		for k, c := range e.cache {
			if first == "" || c.expires.Before(at) {
				first, at = k, c.expires
			}
		}
		delete(e.cache, first)
	}
	e.cache[key] = cached{token: token, expires: until}
}

// tokenResponse is RFC 8693 §2.2.1 (and the RFC 6749 §5.2 error).
type tokenResponse struct {
	AccessToken      string `json:"access_token"`
	IssuedTokenType  string `json:"issued_token_type"`
	TokenType        string `json:"token_type"`
	ExpiresIn        int64  `json:"expires_in"`
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description"`
}

// call performs one exchange and returns the token and its lifetime.
func (e *Exchanger) call(ctx context.Context, r Request) (string, time.Duration, error) {
	form := url.Values{
		"grant_type":           {GrantTokenExchange},
		"subject_token":        {r.SubjectToken},
		"subject_token_type":   {TokenTypeAccessToken},
		"requested_token_type": {TokenTypeAccessToken},
		"audience":             {r.Audience},
	}
	if len(r.Scopes) > 0 {
		form.Set("scope", strings.Join(r.Scopes, " "))
	}
	if r.Credentials.ActorToken != "" {
		form.Set("actor_token", r.Credentials.ActorToken)
		form.Set("actor_token_type", TokenTypeJWT)
	}
	if r.Credentials.Assertion != "" {
		form.Set("client_assertion_type", AssertionTypeJWT)
		form.Set("client_assertion", r.Credentials.Assertion)
		if r.Credentials.ClientID != "" {
			form.Set("client_id", r.Credentials.ClientID)
		}
	}
	// The exchange is the caller's request's work, but one caller hanging up must not fail the
	// others waiting on the same flight: it gets its own deadline.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.TokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, &ExchangeError{Status: http.StatusBadGateway, Description: fmt.Sprintf("token URL %q: %v", r.TokenURL, err)}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	// The exchange span's context, when there is one, so that an identity provider that traces
	// (Keycloak does) continues the trace.
	tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	req.Header.Set("Accept", "application/json")
	if r.Credentials.Assertion == "" {
		// RFC 6749 §2.3.1: the ID and secret are form-encoded before the Basic encoding.
		req.SetBasicAuth(url.QueryEscape(r.Credentials.ClientID), url.QueryEscape(r.Credentials.ClientSecret))
	}
	resp, err := idpclient.Do(e.Client, req)
	if err != nil {
		if re := (*idpclient.RedirectError)(nil); errors.As(err, &re) {
			return "", 0, &ExchangeError{Status: http.StatusBadGateway, Description: "token endpoint " + re.Error()}
		}
		return "", 0, &ExchangeError{Status: http.StatusBadGateway, Description: fmt.Sprintf("identity provider unreachable at %s: %v", r.TokenURL, unwrapURLError(err))}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", 0, &ExchangeError{Status: http.StatusBadGateway, Description: fmt.Sprintf("reading the answer of %s: %v", r.TokenURL, err)}
	}
	var tr tokenResponse
	jerr := json.Unmarshal(body, &tr)
	if resp.StatusCode != http.StatusOK {
		xe := &ExchangeError{Status: http.StatusBadGateway, Code: tr.Error,
			Description: fmt.Sprintf("identity provider at %s answered %s", r.TokenURL, resp.Status)}
		if tr.Error != "" {
			xe.Description += fmt.Sprintf(": %s", tr.Error)
			if tr.ErrorDescription != "" {
				xe.Description += " (" + tr.ErrorDescription + ")"
			}
		}
		// The provider refused the caller's token or the target: the caller's problem. Any other
		// failure (its own error, our credentials) is the gateway's.
		if resp.StatusCode < 500 && tr.Error != "" && tr.Error != "invalid_client" {
			xe.Status = http.StatusForbidden
		}
		return "", 0, xe
	}
	if jerr != nil || tr.AccessToken == "" {
		return "", 0, &ExchangeError{Status: http.StatusBadGateway, Description: fmt.Sprintf("identity provider at %s returned no access_token", r.TokenURL)}
	}
	lifetime := time.Duration(tr.ExpiresIn) * time.Second
	if tr.ExpiresIn <= 0 {
		if exp, ok := jwtExpiry(tr.AccessToken); ok {
			lifetime = exp.Sub(e.Now())
		} else {
			lifetime = time.Minute // no expiry given at all: cache briefly
		}
	}
	return tr.AccessToken, lifetime, nil
}

// jwtExpiry reads exp from a JWT's payload without verifying it (it only bounds a cache entry).
func jwtExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var c struct {
		Exp json.Number `json:"exp"`
	}
	if json.Unmarshal(b, &c) != nil || c.Exp == "" {
		return time.Time{}, false
	}
	f, err := c.Exp.Float64()
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(int64(f), 0), true
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
