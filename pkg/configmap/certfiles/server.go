package certfiles

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Server is a webhook server to hand to the manager (ctrl.Options.WebhookServer) that serves only
// with a certificate. Handlers are registered on it before the manager starts, as
// controller-runtime requires (its mux is not safe to register on while the server starts);
// serving waits until CertReady is closed, because the server cannot start without its
// certificate files. Until then the readiness check (StartedChecker) fails.
type Server struct {
	webhook.Server
	// CertReady is closed once the certificate files are in the server's directory: by
	// cert-controller's rotator (its IsReady), or right away when they come from outside.
	CertReady chan struct{}
}

// NewServer returns a Server for the given options.
func NewServer(o webhook.Options) *Server {
	return &Server{Server: webhook.NewServer(o), CertReady: make(chan struct{})}
}

// Start serves once the certificate is ready, or returns when ctx ends first.
func (s *Server) Start(ctx context.Context) error {
	select {
	case <-s.CertReady:
		return s.Server.Start(ctx)
	case <-ctx.Done():
		return nil
	}
}

// ServerOf returns the manager's webhook server, which must be a Server (from the pillar's
// webhook.NewServer, named in the error).
func ServerOf(mgr manager.Manager) (*Server, error) {
	srv, ok := mgr.GetWebhookServer().(*Server)
	if !ok {
		return nil, fmt.Errorf("the manager's webhook server is a %T; it must come from webhook.NewServer so that it serves only with a certificate", mgr.GetWebhookServer())
	}
	return srv, nil
}

// Open lets the server serve: right away when its certificate comes from outside (externalCertDir
// set), otherwise once r, the rotation of its certificate, has written the files (r.Ready is
// CertReady).
func (s *Server) Open(mgr manager.Manager, externalCertDir string, r Rotation, log logr.Logger) error {
	if externalCertDir != "" {
		close(s.CertReady)
		return nil
	}
	r.Ready = s.CertReady
	if err := r.Add(mgr, log); err != nil {
		return fmt.Errorf("setting up the certificate rotator: %w", err)
	}
	log.Info("the webhook serves once the rotator has provisioned its certificate")
	return nil
}
