package certfiles

import (
	"github.com/go-logr/logr"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Rotation is a serving certificate for a Service that cert-controller's rotator issues from its
// own CA into the Secret Namespace/Secret and renews, and that a Syncer writes from the Secret
// into Dir, where the server reads it.
type Rotation struct {
	Namespace, Secret string
	// Dir is the server's certificate directory (an emptyDir).
	Dir string
	// Keys are the Secret's keys written into Dir (zero: ServingKeys).
	Keys []string
	// ServiceName: the certificate is for ServiceName.Namespace.svc, ServiceName,
	// ServiceName.Namespace, ServiceName.Namespace.svc.cluster.local and ExtraDNSNames.
	ServiceName   string
	ExtraDNSNames []string
	// CAName is the CA's common name; FieldOwner the rotator's field manager; Name its controller's
	// name (unique per process: its metrics carry it).
	CAName, FieldOwner, Name string
	// Webhooks are the webhook configurations whose caBundle the rotator keeps current.
	Webhooks []rotator.WebhookInfo
	// Ready is closed by the rotator once the certificate files are in Dir.
	Ready chan struct{}
}

// Add runs the Syncer and the rotator on mgr. Every replica serves, so every replica needs the
// certificate: neither waits for leader election.
func (r Rotation) Add(mgr manager.Manager, log logr.Logger) error {
	if err := mgr.Add(&Syncer{Config: mgr.GetConfig(), Namespace: r.Namespace, Name: r.Secret, Dir: r.Dir, Keys: r.Keys,
		Log: log.WithName("certfiles")}); err != nil {
		return err
	}
	svc := r.ServiceName + "." + r.Namespace
	return rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:             types.NamespacedName{Namespace: r.Namespace, Name: r.Secret},
		CertDir:               r.Dir,
		CAName:                r.CAName,
		CAOrganization:        "kagenti",
		ControllerName:        r.Name,
		DNSName:               svc + ".svc",
		ExtraDNSNames:         append([]string{r.ServiceName, svc, svc + ".svc.cluster.local"}, r.ExtraDNSNames...),
		IsReady:               r.Ready,
		Webhooks:              r.Webhooks,
		FieldOwner:            r.FieldOwner,
		RequireLeaderElection: false,
	})
}
