package webhook

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// The rotator keeps the serving certificate in a Secret of the controller's own namespace and the
// caBundle of the ValidatingWebhookConfiguration current.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",namespace=kagenti-system,resources=secrets,verbs=get;list;watch;update;patch

// Options say where the webhook's serving certificate comes from.
type Options struct {
	// CertDir holds tls.crt and tls.key provided from outside (cert-manager, a local certificate)
	// and disables the rotator. It must also be the manager's webhook server CertDir.
	CertDir string
	// Without CertDir, the built-in rotator writes the CA and serving certificate into the Secret
	// CertSecret of Namespace, issued for ServiceName.Namespace.svc (plus ExtraDNSNames), keeps the
	// caBundle of the ValidatingWebhookConfiguration WebhookConfig current, and the webhook starts
	// once the kubelet has mounted the Secret at RotatorCertDir (the manager's webhook CertDir).
	Namespace      string
	CertSecret     string
	RotatorCertDir string
	WebhookConfig  string
	ServiceName    string
	ExtraDNSNames  []string
}

// Setup registers the validating webhook with mgr's webhook server once a serving certificate is
// available: right away with CertDir, after the rotator has provisioned one otherwise (the server
// cannot start without its certificate files). Every replica serves, leader or not.
func Setup(mgr ctrl.Manager, o Options, log logr.Logger) error {
	register := func() error {
		return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.TokenExchange{}).WithValidator(Validator{}).Complete()
	}
	if o.CertDir != "" {
		return register()
	}
	svc := o.ServiceName
	ready := make(chan struct{})
	err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: o.CertSecret},
		CertDir:        o.RotatorCertDir,
		CAName:         "kagenti-tokenexchange-ca",
		CAOrganization: "kagenti",
		DNSName:        fmt.Sprintf("%s.%s.svc", svc, o.Namespace),
		ExtraDNSNames: append([]string{
			svc, fmt.Sprintf("%s.%s", svc, o.Namespace), fmt.Sprintf("%s.%s.svc.cluster.local", svc, o.Namespace),
		}, o.ExtraDNSNames...),
		IsReady:               ready,
		Webhooks:              []rotator.WebhookInfo{{Name: o.WebhookConfig, Type: rotator.Validating}},
		FieldOwner:            "kagenti-tokenexchange",
		RequireLeaderElection: false,
	})
	if err != nil {
		return fmt.Errorf("setting up the certificate rotator: %w", err)
	}
	return mgr.Add(everyReplica(func(ctx context.Context) error {
		select {
		case <-ready:
			log.Info("serving certificate ready; starting the validating webhook")
			return register()
		case <-ctx.Done():
			return nil
		}
	}))
}

// everyReplica is a runnable that runs whether or not this replica is the leader.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }

var _ manager.LeaderElectionRunnable = everyReplica(nil)
