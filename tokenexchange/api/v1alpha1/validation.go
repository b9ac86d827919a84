package v1alpha1

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// A clientNameTemplate is literal text with placeholders {{.PodName}}, {{.Namespace}},
// {{.WorkloadName}} and {{.ServiceAccount}} (spaces allowed inside the braces), nothing else. It
// looks like a Go template so existing values keep working, but it is not one: the CRD, the
// webhook, the controller and the client-registration sidecar all read it with
// one parser (internal/authconfig), which only scans it once, and rendering is a substitution whose output
// is bounded by the template's length times the longest value. Go's text/template is never used:
// it would let a short template (nested printf and print of variables) allocate gigabytes when it
// is validated or rendered.

// MaxClientNameTemplateLength bounds a clientNameTemplate (the CRD's maxLength).
const MaxClientNameTemplateLength = authconfig.MaxClientNameTemplateLength

// ClientNameTemplatePattern is the regular expression the CRD's CEL rule applies to
// clientNameTemplate (keep the +kubebuilder marker on KeycloakSpec.ClientNameTemplate identical;
// a test compares them). It accepts exactly what ValidateClientNameTemplate accepts: literal runs
// without '{', '}', ASCII whitespace or control characters, and the four placeholders.
const ClientNameTemplatePattern = `^([^{}[:space:][:cntrl:]]|[{][{] *[.](PodName|Namespace|WorkloadName|ServiceAccount) *[}][}])+$`

// ClientNameVars are the values of a clientNameTemplate's placeholders; the client-registration
// sidecar fills them in for each pod.
type ClientNameVars struct {
	PodName        string
	Namespace      string
	WorkloadName   string
	ServiceAccount string
}

// ValidateClientNameTemplate reports why s is not a clientNameTemplate, or nil. The grammar is
// written once, in the data plane's configuration package, so that admission and the sidecar
// cannot disagree.
func ValidateClientNameTemplate(s string) error {
	return authconfig.ValidateClientNameTemplate(s)
}

// RenderClientName substitutes vars into the template s; it fails for a template
// ValidateClientNameTemplate rejects.
func RenderClientName(s string, vars ClientNameVars) (string, error) {
	return authconfig.RenderClientName(s, authconfig.Workload{
		PodName: vars.PodName, Namespace: vars.Namespace, Name: vars.WorkloadName, ServiceAccount: vars.ServiceAccount,
	})
}

// Validate reports what the controller checks before rendering: the CRD schema checks the same
// (CEL), but objects stored before that rule existed are not re-validated by the API server. The
// validating webhook calls it too.
func (t *TokenExchange) Validate() field.ErrorList {
	var errs field.ErrorList
	if cr := t.Spec.ClientRegistration; cr != nil && cr.Keycloak != nil && cr.Keycloak.ClientNameTemplate != "" {
		p := field.NewPath("spec", "clientRegistration", "keycloak", "clientNameTemplate")
		if err := ValidateClientNameTemplate(cr.Keycloak.ClientNameTemplate); err != nil {
			errs = append(errs, field.Invalid(p, cr.Keycloak.ClientNameTemplate, err.Error()))
		}
	}
	return errs
}
