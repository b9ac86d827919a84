package v1alpha1

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kagenti/platform/pkg/configmap/identity"

	"github.com/kagenti/platform/pkg/configmap/authz"
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

// ClientNameNamespacePattern is the regular expression of the CRD's second CEL rule on
// clientNameTemplate (keep the marker identical; a test compares them): the template starts with
// {{.Namespace}}, followed by the end or a character that cannot occur in a namespace name, so
// that client names are unique per namespace by construction. It accepts exactly what
// ValidateNamespacedClientName accepts (identity.ValidateNamespacedClientName says why).
const ClientNameNamespacePattern = `^[{][{] *[.]Namespace *[}][}]([^-a-z0-9{]|$)`

// ValidateNamespacedClientName reports why the clientNameTemplate s does not start with the
// namespace, or nil.
func ValidateNamespacedClientName(s string) error {
	return identity.ValidateNamespacedClientName(s)
}

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

// SpireSocketDir is the directory the injector mounts the SPIRE agent's socket volume at in
// spiffe-helper. spiffe.socketPath must name a socket inside it.
const SpireSocketDir = authconfig.SpireSocketDir

// The messages of the rules a TokenExchange written before phase 2 may break; the CRD's CEL rules
// (markers in tokenexchange_types.go) say the same.
const (
	msgAdminCredentialsSecret = "adminCredentialsSecret is not supported: client-registration reads the identity provider's credentials from the Secret the injector mounts, kagenti-idp-credentials in the workload's namespace (the injector's identity.idpCredentialsSecret); put the credentials there and remove this field"
	msgProxyUID               = "proxyUid is not supported: the proxies run as the injector's proxy UID (its identity.proxyUID, default 1337), the one UID the interception rules let through; a different value would redirect the proxies' own traffic to themselves. Remove this field"
	msgOutputFormat           = "must be jwt: x509 is not supported, no injected container reads X.509 SVID files (the outbound proxy authenticates with the JWT SVID or the registered client's secret); set jwt or leave the field out"
	msgSocketPath             = "must be a socket in /run/spire/agent-sockets/, the only directory mounted into spiffe-helper (the injector mounts the SPIRE agent's socket volume there; its spireSocket setting chooses the node's directory or CSI driver)"
)

// Validate reports what the controller checks before rendering: the CRD schema checks the same
// (CEL), but objects stored before that rule existed are not re-validated by the API server. The
// validating webhook calls it too.
func (t *TokenExchange) Validate() field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if sp := t.Spec.Spiffe; sp != nil {
		if sp.SocketPath != "" && !InSpireSocketDir(sp.SocketPath) {
			errs = append(errs, field.Invalid(spec.Child("spiffe", "socketPath"), sp.SocketPath, msgSocketPath))
		}
		if sp.OutputFormat != "" && sp.OutputFormat != "jwt" {
			errs = append(errs, field.Invalid(spec.Child("spiffe", "outputFormat"), sp.OutputFormat, msgOutputFormat))
		}
	}
	if cr := t.Spec.ClientRegistration; cr != nil && cr.Keycloak != nil {
		kc := spec.Child("clientRegistration", "keycloak")
		if cr.Keycloak.AdminCredentialsSecret != "" {
			errs = append(errs, field.Forbidden(kc.Child("adminCredentialsSecret"), msgAdminCredentialsSecret))
		}
		if tmpl := cr.Keycloak.ClientNameTemplate; tmpl != "" {
			if err := ValidateClientNameTemplate(tmpl); err != nil {
				errs = append(errs, field.Invalid(kc.Child("clientNameTemplate"), tmpl, err.Error()))
			} else if err := ValidateNamespacedClientName(tmpl); err != nil {
				errs = append(errs, field.Invalid(kc.Child("clientNameTemplate"), tmpl, err.Error()))
			}
		}
	}
	if in := t.Spec.Inbound; in != nil && in.Authorization != nil {
		errs = append(errs, ValidateAuthorization(spec.Child("inbound", "authorization"), in.Authorization)...)
	}
	if out := t.Spec.Outbound; out != nil && out.TrafficInterception != nil && out.TrafficInterception.ProxyUID != nil {
		errs = append(errs, field.Forbidden(spec.Child("outbound", "trafficInterception", "proxyUid"), msgProxyUID))
	}
	return errs
}

// ValidateAuthorization compiles the policy with authz.Compile, the function the inbound proxy
// compiles it with, so that admission refuses exactly the policies the proxy could not run (a CEL
// expression the CRD schema cannot check). Each error names the rule's field, e.g.
// spec.inbound.authorization.rules[2].when.
func ValidateAuthorization(path *field.Path, a *AuthorizationSpec) field.ErrorList {
	var errs field.ErrorList
	def := authz.Effect(a.Default)
	if def != "" && def != authz.Allow && def != authz.Deny {
		errs = append(errs, field.NotSupported(path.Child("default"), a.Default, []string{EffectAllow, EffectDeny}))
		def = ""
	}
	if len(a.Rules) > authz.MaxRules {
		return append(errs, field.TooMany(path.Child("rules"), len(a.Rules), authz.MaxRules))
	}
	if e := a.External; e != nil {
		errs = append(errs, validateExternal(path.Child("external"), e)...)
	}
	rules := make([]authz.Rule, len(a.Rules))
	for i, r := range a.Rules {
		rules[i] = authz.Rule{Name: r.Name, Effect: authz.Effect(r.Effect), When: r.When}
	}
	_, err := authz.Compile(rules, def)
	if err == nil {
		return errs
	}
	var joined []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		joined = j.Unwrap()
	} else {
		joined = []error{err}
	}
	for _, e := range joined {
		re, ok := e.(*authz.RuleError)
		if !ok {
			errs = append(errs, field.Invalid(path, "", e.Error()))
			continue
		}
		value := map[string]string{"name": re.Name, "effect": string(rules[re.Index].Effect), "when": rules[re.Index].When}[re.Field]
		errs = append(errs, field.Invalid(path.Child("rules").Index(re.Index).Child(re.Field), value, fmt.Sprintf("rule %q %s", re.Name, re.Message)))
	}
	return errs
}

// validateExternal checks the external authorizer as the proxy's client does (authz's checks):
// a target it can dial, plaintext only to loopback or a unix socket, a timeout within bounds, a
// CA bundle with a certificate.
func validateExternal(path *field.Path, e *ExternalAuthorizerSpec) field.ErrorList {
	var errs field.ErrorList
	if err := authz.CheckExternalAddress(e.Address, e.TLS != nil); err != nil {
		errs = append(errs, field.Invalid(path.Child("address"), e.Address, err.Error()))
	}
	if e.Timeout != "" {
		d, err := time.ParseDuration(e.Timeout)
		if err == nil {
			err = authz.CheckExternalTimeout(d)
		}
		if err != nil {
			errs = append(errs, field.Invalid(path.Child("timeout"), e.Timeout, err.Error()))
		}
	}
	if e.TLS != nil {
		if _, err := (authconfig.ExternalTLS{CABundle: e.TLS.CABundle}).CertPool(); err != nil {
			errs = append(errs, field.Invalid(path.Child("tls", "caBundle"), "(PEM)", err.Error()))
		}
	}
	return errs
}

// InSpireSocketDir reports whether socketPath (with or without unix://) names a file inside
// SpireSocketDir, without "." or ".." segments that could leave it; the data plane checks the
// same.
func InSpireSocketDir(socketPath string) bool {
	p := strings.TrimPrefix(socketPath, "unix://")
	return !strings.ContainsAny(p, " \t\n\f\r") && authconfig.InSpireSocketDir(p) // RE2's \s, as in the CEL rule
}
