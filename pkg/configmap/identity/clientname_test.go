package identity

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestValidateNamespacedClientName(t *testing.T) {
	for tmpl, ok := range map[string]bool{
		ClientNameTemplate:                     true,
		"{{.Namespace}}/agent-{{.PodName}}":    true,
		"{{ .Namespace }}/{{.ServiceAccount}}": true,
		"{{.Namespace}}":                       true,
		"{{.Namespace}}.{{.WorkloadName}}":     true,
		"{{.Namespace}}:x":                     true,
		"{{.Namespace}}_x":                     true,
		"{{.Namespace}}X":                      true,
		"team-b/agent":                         false, // another namespace's name, spelled out
		"agent-{{.PodName}}":                   false,
		"x/{{.Namespace}}":                     false,
		"{{.WorkloadName}}/{{.Namespace}}":     false,
		"{{.Namespace}}-{{.WorkloadName}}":     false, // a-b + c = a + b-c
		"{{.Namespace}}x":                      false,
		"{{.Namespace}}7":                      false,
		"{{.Namespace}}{{.WorkloadName}}":      false,
		"{{.NamespaceX}}/x":                    false,
		"{{.Namespace":                         false,
		"":                                     false,
	} {
		err := ValidateNamespacedClientName(tmpl)
		if ok {
			assert.NoError(t, err, tmpl)
		} else {
			assert.ErrorIs(t, err, ErrClientNameNotNamespaced, tmpl)
		}
	}
}
