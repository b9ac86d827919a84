package webhook

import (
	"crypto/tls"

	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kagenti/platform/pkg/configmap/certfiles"
)

// Server is the webhook server to hand to the manager (ctrl.Options.WebhookServer): it serves
// once Setup knows the certificate is in place (certfiles.Server).
type Server = certfiles.Server

// NewServer returns a Server for the given options, serving HTTP/1.1 only (HTTP1Only); Setup opens it.
func NewServer(o webhook.Options) *Server {
	o.TLSOpts = append(o.TLSOpts, HTTP1Only)
	return certfiles.NewServer(o)
}

// HTTP1Only makes the webhook server offer HTTP/1.1 alone in the TLS handshake (controller-runtime
// offers h2). Over HTTP/2 the API server sends the request body in a frame of its own after the
// headers, and Go's server hands the body and the response between the connection's goroutines and
// the handler's: the handler waited for its body for longer than it took to answer (TestLoad's HTTP
// handler line). Over HTTP/1.1 the body arrives with the headers on a kept-alive connection. It also
// keeps the webhook clear of HTTP/2's stream-reset flood (CVE-2023-44487).
func HTTP1Only(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }
