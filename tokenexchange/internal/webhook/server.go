package webhook

import (
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kagenti/platform/pkg/configmap/certfiles"
)

// Server is the webhook server to hand to the manager (ctrl.Options.WebhookServer): it serves
// once Setup knows the certificate is in place (certfiles.Server).
type Server = certfiles.Server

// NewServer returns a Server for the given options; Setup opens it.
func NewServer(o webhook.Options) *Server { return certfiles.NewServer(o) }
