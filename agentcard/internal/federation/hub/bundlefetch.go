package hub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
)

// MaxBundleBytes bounds a bundle endpoint's response body.
const MaxBundleBytes = 256 << 10

// Reasons a bundle fetch fails, as the TrustBundleCurrent condition names them.
const (
	ReasonEndpointUnreachable      = v1alpha1.ReasonEndpointUnreachable
	ReasonEndpointNotAuthenticated = v1alpha1.ReasonEndpointNotAuthenticated
	ReasonBundleRejected           = v1alpha1.ReasonBundleRejected
)

// FetchError is a failed bundle fetch with the condition reason it maps to.
type FetchError struct {
	Reason string
	Err    error
}

func (e *FetchError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *FetchError) Unwrap() error { return e.Err }

// BundleEndpoint is where and how a member's SPIFFE bundle is fetched.
type BundleEndpoint struct {
	URL string
	// ID is the SPIFFE ID the endpoint's SVID must carry (https_spiffe).
	ID spiffeid.ID
	// Trust authenticates the endpoint: the member's bundle the hub already holds (https_spiffe).
	Trust x509bundle.Source
	// Web: profile https_web, the endpoint authenticated by Web PKI for its host name against
	// Roots (nil: the system's roots).
	Web   bool
	Roots *x509.CertPool
}

// FetchBundle fetches the SPIFFE bundle of td from ep. go-spiffe's federation.FetchBundle reads
// the response body without a bound, so a hostile or broken endpoint could make the hub buffer
// an arbitrary amount: this reads at most MaxBundleBytes and gives up after timeout.
func FetchBundle(ctx context.Context, td spiffeid.TrustDomain, ep BundleEndpoint, timeout time.Duration) (*spiffebundle.Bundle, error) {
	// The handshake's own verification failing is "not authenticated"; every other transport
	// error is "unreachable". Recording it here avoids matching error strings.
	var authErr atomic.Pointer[error]
	var tlsConf *tls.Config
	if ep.Web {
		tlsConf = &tls.Config{RootCAs: ep.Roots, MinVersion: tls.VersionTLS12}
	} else {
		if ep.ID.TrustDomain() != td {
			return nil, &FetchError{ReasonEndpointNotAuthenticated, fmt.Errorf("endpoint SPIFFE ID %q is not in trust domain %q", ep.ID, td)}
		}
		tlsConf = tlsconfig.TLSClientConfig(ep.Trust, tlsconfig.AuthorizeID(ep.ID))
		verify := tlsConf.VerifyPeerCertificate
		tlsConf.VerifyPeerCertificate = func(raw [][]byte, chains [][]*x509.Certificate) error {
			err := verify(raw, chains)
			if err != nil {
				authErr.Store(&err)
			}
			return err
		}
	}
	tr := &http.Transport{TLSClientConfig: tlsConf, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: timeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.URL, nil)
	if err != nil {
		return nil, &FetchError{ReasonEndpointUnreachable, err}
	}
	resp, err := client.Do(req)
	if err != nil {
		if a := authErr.Load(); a != nil {
			return nil, &FetchError{ReasonEndpointNotAuthenticated, fmt.Errorf("endpoint %s: %w", ep.URL, *a)}
		}
		if webErr := (*tls.CertificateVerificationError)(nil); errors.As(err, &webErr) {
			return nil, &FetchError{ReasonEndpointNotAuthenticated, fmt.Errorf("endpoint %s: %w", ep.URL, err)}
		}
		return nil, &FetchError{ReasonEndpointUnreachable, err}
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, &FetchError{ReasonEndpointUnreachable, fmt.Errorf("GET %s: %s", ep.URL, resp.Status)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBundleBytes+1))
	if err != nil {
		return nil, &FetchError{ReasonEndpointUnreachable, fmt.Errorf("reading %s: %w", ep.URL, err)}
	}
	if len(body) > MaxBundleBytes {
		return nil, &FetchError{ReasonBundleRejected, fmt.Errorf("bundle from %s is larger than %d bytes", ep.URL, MaxBundleBytes)}
	}
	b, err := spiffebundle.Parse(td, body)
	if err != nil {
		return nil, &FetchError{ReasonBundleRejected, fmt.Errorf("bundle from %s: %w", ep.URL, err)}
	}
	if len(b.X509Authorities()) == 0 {
		return nil, &FetchError{ReasonBundleRejected, fmt.Errorf("bundle from %s has no X.509 authorities", ep.URL)}
	}
	// A SPIFFE bundle does not name its trust domain; a SPIRE CA does, in its URI SAN. An
	// authority naming another trust domain is a misconfigured endpoint (the wrong server's
	// bundle), not a rotation.
	for _, ca := range b.X509Authorities() {
		for _, u := range ca.URIs {
			if id, err := spiffeid.FromURI(u); err == nil && id.TrustDomain() != td {
				return nil, &FetchError{ReasonBundleRejected, fmt.Errorf("bundle from %s holds an authority of trust domain %q (%s), not %q",
					ep.URL, id.TrustDomain().Name(), ca.Subject, td.Name())}
			}
		}
	}
	return b, nil
}
