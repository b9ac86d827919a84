package v1alpha1

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// A clientNameTemplate is literal text with placeholders {{.PodName}}, {{.Namespace}},
// {{.WorkloadName}} and {{.ServiceAccount}} (spaces allowed inside the braces), nothing else. It
// looks like a Go template so existing values keep working, but it is not one: the CRD, the
// webhook, the controller and the client-registration sidecar all read it with
// parseClientNameTemplate, which only scans it once, and rendering is a substitution whose output
// is bounded by the template's length times the longest value. Go's text/template is never used:
// it would let a short template (nested printf and print of variables) allocate gigabytes when it
// is validated or rendered.

// MaxClientNameTemplateLength bounds a clientNameTemplate (the CRD's maxLength).
const MaxClientNameTemplateLength = 253

// ClientNameTemplatePattern is the regular expression the CRD's CEL rule applies to
// clientNameTemplate (keep the +kubebuilder marker on KeycloakSpec.ClientNameTemplate identical;
// a test compares them). It accepts exactly what parseClientNameTemplate accepts: literal runs
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

// clientNameVariables are the placeholder names, in documentation order.
var clientNameVariables = []string{"PodName", "Namespace", "WorkloadName", "ServiceAccount"}

func (v ClientNameVars) value(name string) string {
	switch name {
	case "PodName":
		return v.PodName
	case "Namespace":
		return v.Namespace
	case "WorkloadName":
		return v.WorkloadName
	case "ServiceAccount":
		return v.ServiceAccount
	}
	return ""
}

// clientNamePart is one literal run or one placeholder of a parsed template.
type clientNamePart struct {
	literal  string
	variable string // set for a placeholder
}

// ValidateClientNameTemplate reports why s is not a clientNameTemplate, or nil.
func ValidateClientNameTemplate(s string) error {
	_, err := parseClientNameTemplate(s)
	return err
}

// RenderClientName substitutes vars into the template s; it fails for a template
// ValidateClientNameTemplate rejects.
func RenderClientName(s string, vars ClientNameVars) (string, error) {
	parts, err := parseClientNameTemplate(s)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		if p.variable != "" {
			b.WriteString(vars.value(p.variable))
		} else {
			b.WriteString(p.literal)
		}
	}
	return b.String(), nil
}

// parseClientNameTemplate splits s into literal runs and placeholders in one pass.
func parseClientNameTemplate(s string) ([]clientNamePart, error) {
	switch {
	case s == "":
		return nil, fmt.Errorf("must not be empty")
	case utf8.RuneCountInString(s) > MaxClientNameTemplateLength:
		return nil, fmt.Errorf("must be at most %d characters (has %d)", MaxClientNameTemplateLength, utf8.RuneCountInString(s))
	}
	var parts []clientNamePart
	for rest := s; rest != ""; {
		open := strings.Index(rest, "{{")
		lit := rest
		if open >= 0 {
			lit = rest[:open]
		}
		if i := strings.IndexFunc(lit, notLiteral); i >= 0 {
			return nil, fmt.Errorf("%q at offset %d is not allowed in literal text (no '{', '}', whitespace or control characters outside a placeholder)",
				lit[i], len(s)-len(rest)+i)
		}
		if lit != "" {
			parts = append(parts, clientNamePart{literal: lit})
		}
		if open < 0 {
			break
		}
		rest = rest[open:]
		end := strings.Index(rest, "}}")
		if end < 0 {
			return nil, fmt.Errorf("placeholder at offset %d is not closed with }}", len(s)-len(rest))
		}
		name, err := placeholder(rest[2:end])
		if err != nil {
			return nil, fmt.Errorf("%q at offset %d: %w", rest[:end+2], len(s)-len(rest), err)
		}
		parts = append(parts, clientNamePart{variable: name})
		rest = rest[end+2:]
	}
	return parts, nil
}

// placeholder returns the variable name of the text between {{ and }}.
func placeholder(inner string) (string, error) {
	field := strings.Trim(inner, " ")
	name, isField := strings.CutPrefix(field, ".")
	if isField && name != "" && !strings.ContainsFunc(field, func(r rune) bool { return r == ' ' }) {
		for _, v := range clientNameVariables {
			if name == v {
				return v, nil
			}
		}
		return "", fmt.Errorf("unknown variable .%s; %s", name, allowedPlaceholders)
	}
	return "", fmt.Errorf("not a placeholder; %s (no functions, pipelines, variables or actions)", allowedPlaceholders)
}

const allowedPlaceholders = "allowed: {{.PodName}}, {{.Namespace}}, {{.WorkloadName}}, {{.ServiceAccount}}"

// notLiteral reports the characters ClientNameTemplatePattern keeps out of literal text.
func notLiteral(r rune) bool {
	return r == '{' || r == '}' || r == ' ' || r < 0x20 || r == 0x7f
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
