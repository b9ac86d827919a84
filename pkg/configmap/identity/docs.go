package identity

import (
	"fmt"
	"strings"
)

// Markers around the table of the identity settings in docs/identity.md, which MarkdownTable
// renders (TestDocsTableIsTheTable; UPDATE_GOLDEN=1 rewrites it).
const (
	DocsTableBegin = "<!-- identity-settings: generated from pkg/configmap/identity.Settings; UPDATE_GOLDEN=1 go test ./pkg/configmap/identity rewrites it -->"
	DocsTableEnd   = "<!-- /identity-settings -->"
)

// MarkdownTable renders Settings as the table of docs/identity.md, one row per setting.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| setting (TokenExchange `spec`, `config.yaml`) | variable of `defaults.env` | default (**built-in**: the data plane's without a line) | injector's `config.yaml` | merge | meaning |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	code := func(s string) string {
		if s == "" {
			return ""
		}
		return "`" + s + "`"
	}
	for _, s := range Settings {
		def := s.Default
		switch {
		case s.HasBuiltIn:
			def = "**built-in** " + code(s.BuiltIn)
		case def == "" && s.Implied != "":
			def = code(s.Implied)
		}
		where := code(s.Path)
		switch {
		case s.CRD == Rejected:
			where += " (TokenExchange: rejected)"
		case s.CRD == Absent:
			where += " (not in TokenExchange)"
		}
		if s.NotInFile {
			where += " (not in `config.yaml`)"
		}
		if s.StartupOnly {
			where += " ¹"
		}
		injector := code(s.Injector)
		if s.Env != "" && s.Injector == "" {
			injector = "the workload"
		}
		merge := ""
		if s.Merge == Union {
			merge = "union"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", where, code(s.Env), def, injector, merge, s.Doc)
	}
	b.WriteString("\n¹ takes effect at the next pod start ([below](#settings-that-take-effect-only-at-pod-start)).\n")
	return b.String()
}
