package identity

import (
	"errors"
	"strings"
)

// Client names are unique per namespace by construction: a client name template must start with
// the placeholder {{.Namespace}}, followed by the end of the template or by a character that
// cannot occur in a namespace name. A namespace name is a DNS label (RFC 1123: lower-case
// letters, digits and '-'), so a rendered name's namespace is its leading run of those
// characters whatever the rest of the template and the values of the other placeholders: two
// namespaces never render the same name, under the same template or under different ones,
// however their workloads are named. The namespace anywhere else does not give that:
// "{{.WorkloadName}}-{{.Namespace}}" renders "a-b-c" for workload "a" in namespace "b-c" and for
// workload "a-b" in namespace "c", and a template in one namespace could spell out another
// namespace's names ("team-b/x-{{.Namespace}}" against team-b's workload "x-team-a").
//
// Every reader of a template applies this rule: the TokenExchange CRD (a CEL rule), its
// validating webhook and its controller, the injector's configuration, and kagenti-authbridge.

// ErrClientNameNotNamespaced is why a client name template fails ValidateNamespacedClientName.
var ErrClientNameNotNamespaced = errors.New(
	"must start with {{.Namespace}} followed by '/' (or the end, or another character that cannot occur in a namespace name), so that no two namespaces can register clients of the same name")

// ValidateNamespacedClientName reports whether the client name template t starts with the
// namespace, as the rule above says (t's other placeholders are the template grammar's concern).
func ValidateNamespacedClientName(t string) error {
	rest, ok := strings.CutPrefix(t, "{{")
	if !ok {
		return ErrClientNameNotNamespaced
	}
	rest = strings.TrimLeft(rest, " ")
	if rest, ok = strings.CutPrefix(rest, ".Namespace"); !ok {
		return ErrClientNameNotNamespaced
	}
	rest = strings.TrimLeft(rest, " ")
	if rest, ok = strings.CutPrefix(rest, "}}"); !ok {
		return ErrClientNameNotNamespaced
	}
	if rest != "" && inNamespaceName(rest[0]) || strings.HasPrefix(rest, "{") {
		return ErrClientNameNotNamespaced
	}
	return nil
}

// inNamespaceName: c may occur in a namespace name.
func inNamespaceName(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-'
}
