// Package fetch gets agent cards from pod IPs: bounded global concurrency, a per-request timeout,
// bounded headers and body, no redirects, no proxies, and conditional GETs with ETag / If-None-Match.
//
// Everything a pod sends is bounded before it is kept: the response headers (MaxHeaderBytes, read
// by net/http and refused beyond), the body (MaxBodyBytes), the one header kept between fetches
// (the ETag, MaxETagBytes) and the error messages (no reason phrase, a cut Location).
package fetch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Default paths: A2A ≥ 0.3 first, the older well-known path on 404.
const (
	PathAgentCard = "/.well-known/agent-card.json"
	PathLegacy    = "/.well-known/agent.json"
	// MaxBodyBytes bounds a card's size as served.
	MaxBodyBytes = 256 << 10
	// MaxHeaderBytes bounds a response's headers; net/http refuses larger ones without reading them.
	MaxHeaderBytes = 16 << 10
	// MaxETagBytes bounds the ETag kept for the next conditional GET; a longer one is not kept (the
	// next fetch is unconditional), so a pod cannot make the controller hold more than this per pod.
	MaxETagBytes = 256
	// maxQuoted bounds what of a pod's header is repeated in an error message.
	maxQuoted = 128
)

// Fetcher fetches cards. Safe for concurrent use.
type Fetcher struct {
	client    *http.Client
	transport *http.Transport
	sem       chan struct{}
	timeout   time.Duration
	// attest, when set, fetches https endpoints over mutual TLS (WithAttestation).
	attest *Attestation
}

// WithAttestation makes f fetch the cards of https endpoints over mutual TLS with a: the pod must
// present an X.509-SVID of the identity its card is bound to (Request.PeerID).
func (f *Fetcher) WithAttestation(a *Attestation) *Fetcher {
	f.attest = a
	return f
}

// Attests says whether f fetches https endpoints over mutual TLS.
func (f *Fetcher) Attests() bool { return f.attest != nil }

// New returns a Fetcher allowing at most concurrency requests in flight across all cards.
func New(concurrency int, timeout time.Duration) *Fetcher {
	if concurrency < 1 {
		concurrency = 1
	}
	transport := &http.Transport{
		Proxy:       nil, // pod IPs are contacted directly, never through an environment proxy
		DialContext: (&net.Dialer{Timeout: timeout}).DialContext,
		// No connection outlives its fetch. A pod is fetched once per sync period (30 s by
		// default), so a kept connection is idle for a whole period and, with more pods than the
		// pool holds, evicted before its next use; meanwhile each costs two goroutines and 8 KiB of
		// buffers (≈ 3 MB for the 128 connections a pool of 2 × --max-concurrent-fetches kept at
		// 1,000 AgentCards × 3 pods).
		DisableKeepAlives: true,
		// Pod certificates rarely name pod IPs; a card's authenticity comes from its JWS signature,
		// not from TLS, so the server certificate is not verified for https endpoints.
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
		TLSHandshakeTimeout: timeout,
		// net/http's default is 10 MiB per response, held while it is parsed.
		MaxResponseHeaderBytes: MaxHeaderBytes,
	}
	return &Fetcher{
		client: &http.Client{
			Transport: transport,
			Timeout:   timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse // a redirect could lead off the pod
			},
		},
		transport: transport,
		sem:       make(chan struct{}, concurrency),
		timeout:   timeout,
	}
}

// Request is one fetch from one pod.
type Request struct {
	Scheme string
	PodIP  string
	Port   int32
	// Paths are tried in order, the next one only on 404.
	Paths []string
	// ETag of the previous response from this pod and path, sent as If-None-Match.
	ETag string
	// ETagPath is the path the ETag belongs to.
	ETagPath string
	// PeerID, with an https Scheme and a Fetcher that attests, is the SPIFFE ID the pod must
	// present over mutual TLS: the identity the card is bound to. With an http Scheme it is the
	// one required when the pod answers 426 Upgrade Required to TLS (KindMTLSRequired): the
	// fetch is made again over mutual TLS.
	PeerID string
}

// Response is what a pod returned.
type Response struct {
	URL  string
	Path string
	// NotModified means the pod answered 304 to If-None-Match: the previous body is still current.
	NotModified bool
	Body        []byte
	ETag        string
	// Over is how the card was fetched: OverHTTP, OverHTTPS (the server not authenticated: the
	// card's signature is what counts) or OverMTLS (the pod proved PeerID).
	Over string
	// PeerID is the SPIFFE ID the pod proved (OverMTLS).
	PeerID string
}

// KindMTLSRequired is the kind of an http fetch answered 426 Upgrade Required to TLS: the port
// accepts only mutual TLS. A Fetcher that attests asks again over mutual TLS (Request.PeerID).
const KindMTLSRequired = "MTLSRequired"

// Error is a fetch failure with a short CamelCase kind for metrics.
type Error struct {
	Kind string
	URL  string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.URL, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Fetch gets the card. The host is always the pod IP: the request never follows anything the pod
// or the card says.
func (f *Fetcher) Fetch(ctx context.Context, r Request) (*Response, error) {
	ip, err := netip.ParseAddr(r.PodIP)
	if err != nil {
		return nil, &Error{Kind: "InvalidPodIP", URL: r.PodIP, Err: fmt.Errorf("pod IP %q: %w", r.PodIP, err)}
	}
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, &Error{Kind: "Canceled", URL: r.PodIP, Err: ctx.Err()}
	}
	defer func() { <-f.sem }()
	host := net.JoinHostPort(ip.String(), strconv.Itoa(int(r.Port)))
	client, over := f.client, r.Scheme
	var peer spiffeid.ID
	if (r.Scheme == "https" || r.Scheme == "http") && f.attest != nil && r.PeerID != "" {
		if peer, err = spiffeid.FromString(r.PeerID); err != nil {
			return nil, &Error{Kind: "PeerNotAttested", URL: r.Scheme + "://" + host, Err: fmt.Errorf("the card is bound to %q, not a SPIFFE ID: %w", r.PeerID, err)}
		}
		if r.Scheme == "https" {
			client, over = f.attestedClient(peer), OverMTLS
		}
	}
	scheme := r.Scheme
	var last error
	for _, p := range r.Paths {
		etag := ""
		if p == r.ETagPath {
			etag = r.ETag
		}
		url := scheme + "://" + host + p
		resp, err := f.get(ctx, client, url, etag)
		if over == OverHTTP && KindOf(err) == KindMTLSRequired && !peer.IsZero() {
			// The port accepts only mutual TLS (an authbridge inbound with mtls.mode strict): ask
			// again over it, the pod proving the identity the card is bound to. Never the other
			// way round: a failed https fetch does not fall back to plain HTTP.
			scheme, client, over = "https", f.attestedClient(peer), OverMTLS
			url = scheme + "://" + host + p
			resp, err = f.get(ctx, client, url, etag)
		}
		if err != nil {
			var fe *Error
			if over == OverMTLS && errors.As(err, &fe) && fe.Kind == "Unreachable" {
				if pe, ok := peerError(url, peer, fe.Err); ok {
					return nil, pe
				}
			}
			if errors.As(err, &fe) && fe.Kind == "NotFound" {
				last = err
				continue
			}
			return nil, err
		}
		resp.Path, resp.Over = p, over
		if over == OverMTLS {
			resp.PeerID = peer.String()
		}
		return resp, nil
	}
	return nil, last
}

func (f *Fetcher) get(ctx context.Context, client *http.Client, url, etag string) (*Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, &Error{Kind: "InvalidURL", URL: url, Err: err}
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "kagenti-agentcard")
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, f.transportError(url, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && etag != "":
		return &Response{URL: url, NotModified: true, ETag: etag}, nil
	case resp.StatusCode == http.StatusNotFound:
		return nil, &Error{Kind: "NotFound", URL: url, Err: errors.New("HTTP 404 Not Found")}
	case resp.StatusCode == http.StatusUpgradeRequired && upgradesToTLS(resp.Header):
		return nil, &Error{Kind: KindMTLSRequired, URL: url, Err: errors.New("HTTP 426 Upgrade Required: the pod accepts only mutual TLS on this port (a kagenti-authbridge inbound with mtls.mode strict); the controller fetches it so only with an X.509-SVID of its own and the identity the card is bound to")}
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return nil, &Error{Kind: "Redirect", URL: url, Err: fmt.Errorf("HTTP %d redirect to %q is not followed", resp.StatusCode, cut(resp.Header.Get("Location"), maxQuoted))}
	case resp.StatusCode != http.StatusOK:
		// The standard text, not the pod's reason phrase: the message ends up in the AgentCard status.
		return nil, &Error{Kind: "HTTPError", URL: url, Err: fmt.Errorf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, f.transportError(url, fmt.Errorf("reading body: %w", err))
	}
	if len(body) > MaxBodyBytes {
		return nil, &Error{Kind: "TooLarge", URL: url, Err: fmt.Errorf("card larger than %d bytes", MaxBodyBytes)}
	}
	return &Response{URL: url, Body: body, ETag: keptETag(resp.Header.Get("ETag"))}, nil
}

// upgradesToTLS reports whether a 426 answer asks for TLS (Upgrade: TLS/1.3, TLS/1.2, RFC 9110
// §7.8), as a strict authbridge inbound does.
func upgradesToTLS(h http.Header) bool {
	for _, v := range h.Values("Upgrade") {
		for _, p := range strings.Split(v, ",") {
			if name, _, _ := strings.Cut(strings.TrimSpace(p), "/"); strings.EqualFold(name, "TLS") {
				return true
			}
		}
	}
	return false
}

// transportError classifies an error of the connection (sending, or reading the answer).
func (f *Fetcher) transportError(url string, err error) *Error {
	kind := "Unreachable"
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded):
		kind = "Timeout"
		err = fmt.Errorf("no answer within %s", f.timeout)
	case strings.Contains(err.Error(), "server response headers exceeded"):
		// net/http has no typed error for MaxResponseHeaderBytes; this is an answer, not silence.
		kind = "TooLarge"
		err = fmt.Errorf("response headers larger than %d bytes", MaxHeaderBytes)
	}
	return &Error{Kind: kind, URL: url, Err: err}
}

// keptETag returns the ETag to send back as If-None-Match, or "" when it is too long to keep.
func keptETag(etag string) string {
	if len(etag) > MaxETagBytes {
		return ""
	}
	return etag
}

// cut shortens s to at most n bytes for an error message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// NoAnswer reports whether err means the pod did not answer at all (a timeout, a refused or reset
// connection), as opposed to an answer the controller did not like (404, 5xx, a redirect, a body
// too large).
func NoAnswer(err error) bool {
	k := KindOf(err)
	return k == "Timeout" || k == "Unreachable"
}

// KindOf returns the failure kind of a fetch error.
func KindOf(err error) string {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Kind
	}
	return "Error"
}
