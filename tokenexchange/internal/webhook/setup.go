package webhook

import (
	"cmp"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kagenti/platform/pkg/configmap/certfiles"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// The rotator keeps the serving certificate in a Secret of the controller's own namespace and the
// caBundle of the ValidatingWebhookConfiguration current.
// Its informers list and watch the kind (RBAC cannot restrict a list without a name field selector,
// and cert-controller's cache sets none); it writes only the configuration and the Secret named by
// the default flags. Renaming either needs the same change in the RBAC (docs/security.md).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,resourceNames=kagenti-tokenexchange,verbs=update
// +kubebuilder:rbac:groups="",namespace=kagenti-system,resources=secrets,verbs=list;watch
// +kubebuilder:rbac:groups="",namespace=kagenti-system,resources=secrets,resourceNames=kagenti-tokenexchange-cert,verbs=update

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
	// RotatorName names the rotator's controller (unique per process; its metrics carry it).
	// Default: kagenti-tokenexchange-cert-rotator.
	RotatorName string
}

// Setup registers the validating webhook on the manager's webhook server, which must come from
// NewServer, before the manager starts, and opens that server once a serving certificate is
// available: right away with CertDir, once the rotator has provisioned one otherwise. Every
// replica serves, leader or not.
func Setup(mgr ctrl.Manager, o Options, log logr.Logger) error {
	srv, err := certfiles.ServerOf(mgr)
	if err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &v1alpha1.TokenExchange{}).WithValidator(Validator{}).Complete(); err != nil {
		return err
	}
	return srv.Open(mgr, o.CertDir, certfiles.Rotation{Namespace: o.Namespace, Secret: o.CertSecret, Dir: o.RotatorCertDir,
		ServiceName: o.ServiceName, ExtraDNSNames: o.ExtraDNSNames,
		CAName: "kagenti-tokenexchange-ca", FieldOwner: "kagenti-tokenexchange", Name: cmp.Or(o.RotatorName, "kagenti-tokenexchange-cert-rotator"),
		Webhooks: []rotator.WebhookInfo{{Name: o.WebhookConfig, Type: rotator.Validating}},
	}, log)
}
