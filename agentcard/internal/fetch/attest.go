package fetch

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/kagenti/platform/pkg/configmap/contract"
)

// How a card was fetched (PodCard.fetchedOver).
const (
	OverHTTP  = "http"
	OverHTTPS = "https"
	// OverMTLS: over mutual TLS, the controller presenting its X.509-SVID and the pod an SVID of
	// the identity the card is bound to.
	OverMTLS = "mtls"
)

// Attestation is the controller's own identity for fetching cards over mutual TLS: the X.509-SVID
// it presents and the trust bundles it checks a pod's SVID against (the SPIRE Workload API, or
// files a per-cluster CA writes).
type Attestation struct {
	SVID    x509svid.Source
	Bundles x509bundle.Source
}

// attestedClient fetches https://... from a pod that must present an X.509-SVID of peer, the
// controller presenting its own. The TLS configuration is the request's (its peer), so the request
// gets a transport of its own; connections are not kept between fetches anyway.
//
// It offers ALPN kagenti-mtls/1 first, then http/1.1, and speaks HTTP/1.1 in either: a pod whose
// kagenti-authbridge inbound terminates mutual TLS selects only kagenti-mtls/1 and refuses a client
// offering only the HTTP protocols; an agent terminating mutual TLS itself selects http/1.1 (or
// nothing). HTTP/2 is not offered: a card is one small GET.
func (f *Fetcher) attestedClient(peer spiffeid.ID) *http.Client {
	t := f.transport.Clone()
	t.TLSClientConfig = tlsconfig.MTLSClientConfig(f.attest.SVID, f.attest.Bundles, tlsconfig.AuthorizeID(peer))
	t.TLSClientConfig.NextProtos = []string{contract.MTLSALPN, "http/1.1"}
	c := *f.client
	c.Transport = t
	return &c
}

// peerError turns a failed mutual TLS handshake into the fetch's error: the pod did not prove the
// identity the card is bound to.
func peerError(url string, peer spiffeid.ID, err error) (*Error, bool) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, false
	}
	msg := err.Error()
	for _, marker := range []string{"x509svid:", "unexpected ID", "tls:", "certificate"} {
		if strings.Contains(msg, marker) {
			return &Error{Kind: "PeerNotAttested", URL: url, Err: fmt.Errorf("the pod did not prove it is %s over mutual TLS: %v", peer, err)}, true
		}
	}
	return nil, false
}
