package webhook

import (
	"context"

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

// NewServer returns a Server for the given options; Setup opens it.
func NewServer(o webhook.Options) *Server {
	return &Server{Server: webhook.NewServer(o), certReady: make(chan struct{})}
}

// Start serves once the certificate is ready, or returns when ctx ends first.
func (s *Server) Start(ctx context.Context) error {
	select {
	case <-s.certReady:
		return s.Server.Start(ctx)
	case <-ctx.Done():
		return nil
	}
}
