package authconfig

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// A client name template is literal text with the placeholders {{.PodName}}, {{.Namespace}},
// {{.WorkloadName}} and {{.ServiceAccount}} (spaces allowed inside the braces), nothing else.
// It looks like a Go template but is substituted, never executed. The grammar is the one
// TokenExchange admission enforces: api/v1alpha1 calls these functions, and its CRD pattern
// (ClientNameTemplatePattern) is held to the same answers by a test on the API server.

// MaxClientNameTemplateLength bounds a template (the CRD's maxLength).
const MaxClientNameTemplateLength = 253

var clientNameVariables = []string{"PodName", "Namespace", "WorkloadName", "ServiceAccount"}

const allowedPlaceholders = "allowed: {{.PodName}}, {{.Namespace}}, {{.WorkloadName}}, {{.ServiceAccount}}"

// ValidateClientNameTemplate reports why s is not a client name template, or nil.
func ValidateClientNameTemplate(s string) error {
	return scanClientNameTemplate(s, nil)
}

// RenderClientName substitutes the workload's values into the template s.
func RenderClientName(s string, w Workload) (string, error) {
	var b strings.Builder
	err := scanClientNameTemplate(s, func(literal, variable string) {
		switch variable {
		case "":
			b.WriteString(literal)
		case "PodName":
			b.WriteString(w.PodName)
		case "Namespace":
			b.WriteString(w.Namespace)
		case "WorkloadName":
			b.WriteString(w.Name)
		case "ServiceAccount":
			b.WriteString(w.ServiceAccount)
		}
	})
	return b.String(), err
}

// scanClientNameTemplate walks s once, calling emit (when not nil) for each literal run or
// placeholder, and fails on the first character outside the grammar.
func scanClientNameTemplate(s string, emit func(literal, variable string)) error {
	switch {
	case s == "":
		return fmt.Errorf("must not be empty")
	case utf8.RuneCountInString(s) > MaxClientNameTemplateLength:
		return fmt.Errorf("must be at most %d characters (has %d)", MaxClientNameTemplateLength, utf8.RuneCountInString(s))
	}
	for rest := s; rest != ""; {
		open := strings.Index(rest, "{{")
		lit := rest
		if open >= 0 {
			lit = rest[:open]
		}
		if i := strings.IndexFunc(lit, notLiteral); i >= 0 {
			return fmt.Errorf("%q at offset %d is not allowed in literal text (no '{', '}', whitespace or control characters outside a placeholder)",
				lit[i], len(s)-len(rest)+i)
		}
		if lit != "" && emit != nil {
			emit(lit, "")
		}
		if open < 0 {
			return nil
		}
		rest = rest[open:]
		end := strings.Index(rest, "}}")
		if end < 0 {
			return fmt.Errorf("placeholder at offset %d is not closed with }}", len(s)-len(rest))
		}
		name, err := placeholder(rest[2:end])
		if err != nil {
			return fmt.Errorf("%q at offset %d: %w", rest[:end+2], len(s)-len(rest), err)
		}
		if emit != nil {
			emit("", name)
		}
		rest = rest[end+2:]
	}
	return nil
}

// placeholder returns the variable named between {{ and }}.
func placeholder(inner string) (string, error) {
	field := strings.Trim(inner, " ")
	name, isField := strings.CutPrefix(field, ".")
	if !isField || name == "" || strings.Contains(field, " ") {
		return "", fmt.Errorf("not a placeholder; %s (no functions, pipelines, variables or actions)", allowedPlaceholders)
	}
	for _, v := range clientNameVariables {
		if name == v {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown variable .%s; %s", name, allowedPlaceholders)
}

func notLiteral(r rune) bool {
	return r == '{' || r == '}' || r == ' ' || r < 0x20 || r == 0x7f
}
