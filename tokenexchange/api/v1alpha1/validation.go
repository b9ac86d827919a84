package v1alpha1

import (
	"fmt"
	"sort"
	"strings"
	"text/template"
	"text/template/parse"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ClientNameVars are the variables a clientNameTemplate may use; the client-registration sidecar
// fills them in for each pod.
type ClientNameVars struct {
	PodName        string
	Namespace      string
	WorkloadName   string
	ServiceAccount string
}

var clientNameVarSet = map[string]bool{"PodName": true, "Namespace": true, "WorkloadName": true, "ServiceAccount": true}

// Validate reports what the CRD schema cannot check (it has no Go template parser). The validating
// webhook and the reconciler both call it, so the rule holds even where the webhook is not installed.
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

// ValidateClientNameTemplate checks that s parses as a Go text/template that uses only
// .PodName, .Namespace, .WorkloadName and .ServiceAccount and renders a non-empty name.
func ValidateClientNameTemplate(s string) error {
	tmpl, err := template.New("clientNameTemplate").Option("missingkey=error").Parse(s)
	if err != nil {
		return fmt.Errorf("not a valid Go template: %s", strings.TrimPrefix(err.Error(), "template: "))
	}
	if len(tmpl.Templates()) > 1 {
		return fmt.Errorf("must not define nested templates")
	}
	if tmpl.Tree == nil || tmpl.Root == nil {
		return fmt.Errorf("must not be empty")
	}
	if bad := unknownFields(tmpl.Root); len(bad) > 0 {
		return fmt.Errorf("uses unknown variable(s) %s; allowed: .PodName, .Namespace, .WorkloadName, .ServiceAccount",
			strings.Join(bad, ", "))
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, ClientNameVars{PodName: "p", Namespace: "n", WorkloadName: "w", ServiceAccount: "s"}); err != nil {
		return fmt.Errorf("cannot be rendered: %s", strings.TrimPrefix(err.Error(), "template: "))
	}
	if strings.TrimSpace(b.String()) == "" {
		return fmt.Errorf("renders an empty client name")
	}
	return nil
}

// RenderClientName executes a template already accepted by ValidateClientNameTemplate.
func RenderClientName(s string, vars ClientNameVars) (string, error) {
	tmpl, err := template.New("clientNameTemplate").Option("missingkey=error").Parse(s)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = tmpl.Execute(&b, vars)
	return b.String(), err
}

// unknownFields walks the parse tree and returns every data reference that is not one of the
// documented variables (sorted, de-duplicated).
func unknownFields(root parse.Node) []string {
	seen := map[string]bool{}
	var walk func(n parse.Node)
	walk = func(n parse.Node) {
		switch n := n.(type) {
		case nil:
		case *parse.ListNode:
			if n == nil {
				return
			}
			for _, c := range n.Nodes {
				walk(c)
			}
		case *parse.ActionNode:
			walk(n.Pipe)
		case *parse.PipeNode:
			if n == nil {
				return
			}
			for _, c := range n.Cmds {
				walk(c)
			}
		case *parse.CommandNode:
			for _, a := range n.Args {
				walk(a)
			}
		case *parse.IfNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.WithNode:
			seen["{{with}}"] = true // changes the meaning of "."; keep templates flat
		case *parse.RangeNode:
			seen["{{range}}"] = true
		case *parse.TemplateNode:
			seen["{{template}}"] = true
		case *parse.FieldNode:
			if len(n.Ident) != 1 || !clientNameVarSet[n.Ident[0]] {
				seen["."+strings.Join(n.Ident, ".")] = true
			}
		case *parse.VariableNode:
			// $ is the data; $.X must be a documented field. Variables declared in the template are fine.
			if n.Ident[0] == "$" && len(n.Ident) > 1 && (len(n.Ident) != 2 || !clientNameVarSet[n.Ident[1]]) {
				seen[strings.Join(n.Ident, ".")] = true
			}
		case *parse.ChainNode:
			seen[n.String()] = true
		case *parse.DotNode:
			seen["."] = true
		}
	}
	walk(root)
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
