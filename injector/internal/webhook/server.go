package webhook

import (
	"context"
	"crypto/tls"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Server is the webhook server to hand to the manager (ctrl.Options.WebhookServer). Handlers are
// registered on it before the manager starts, as controller-runtime requires (its mux is not safe
// to register on while the server starts); serving waits until Setup knows the certificate is in
// place, because the server cannot start without its certificate files. Until then the readiness
// check (StartedChecker) fails.
type Server struct {
	webhook.Server
	certReady chan struct{}
}

// NewServer returns a Server for the given options, serving HTTP/1.1 only (HTTP1Only); Setup opens it.
func NewServer(o webhook.Options) *Server {
	o.TLSOpts = append(o.TLSOpts, HTTP1Only)
	return &Server{Server: webhook.NewServer(o), certReady: make(chan struct{})}
}

// HTTP1Only makes the webhook server offer HTTP/1.1 alone in the TLS handshake (controller-runtime
// offers h2). Over HTTP/2 the API server sends the request body in a frame of its own after the
// headers, and Go's server hands the body and the response between the connection's goroutines and
// the handler's: the handler waited for its body for longer than it took to answer (TestLoad's HTTP
// handler line). Over HTTP/1.1 the body arrives with the headers on a kept-alive connection. It also
// keeps the webhook clear of HTTP/2's stream-reset flood (CVE-2023-44487).
func HTTP1Only(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }

// Start serves once the certificate is ready, or returns when ctx ends first.
func (s *Server) Start(ctx context.Context) error {
	select {
	case <-s.certReady:
		return s.Server.Start(ctx)
	case <-ctx.Done():
		return nil
	}
}
