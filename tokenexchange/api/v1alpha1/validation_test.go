package v1alpha1

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestValidateClientNameTemplate(t *testing.T) {
	for _, tc := range []struct {
		tmpl    string
		wantErr string
	}{
		{tmpl: "agent-{{.PodName}}"},
		{tmpl: "{{.Namespace}}/{{.WorkloadName}}"},
		{tmpl: "{{.ServiceAccount}}-{{.PodName | printf \"%s\"}}"},
		{tmpl: "{{if .PodName}}{{.PodName}}{{else}}x{{end}}"},
		{tmpl: "fixed-name"},
		{tmpl: "{{$.Namespace}}-{{ $n := .WorkloadName }}{{$n}}"},
		{tmpl: "agent-{{.PodName", wantErr: "not a valid Go template"},
		{tmpl: "agent-{{.Pod}}", wantErr: "unknown variable(s) .Pod;"},
		{tmpl: "{{.PodName.Foo}}", wantErr: "unknown variable(s) .PodName.Foo"},
		{tmpl: "{{.}}", wantErr: "unknown variable(s) ."},
		{tmpl: "{{$.Secret}}", wantErr: "unknown variable(s) $.Secret"},
		{tmpl: "{{range .PodName}}x{{end}}", wantErr: "{{range}}"},
		{tmpl: `{{define "x"}}a{{end}}{{template "x"}}`, wantErr: "nested templates"},
		{tmpl: "{{if .PodName}}{{end}}", wantErr: "renders an empty client name"},
		{tmpl: "{{index .PodName 5}}", wantErr: "cannot be rendered"},
	} {
		t.Run(tc.tmpl, func(t *testing.T) {
			err := ValidateClientNameTemplate(tc.tmpl)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			if assert.Error(t, err) {
				assert.Contains(t, err.Error(), tc.wantErr)
			}
		})
	}
}

func TestValidateFieldPath(t *testing.T) {
	te := &TokenExchange{Spec: TokenExchangeSpec{ClientRegistration: &ClientRegistrationSpec{
		Keycloak: &KeycloakSpec{ClientNameTemplate: "{{.Nope}}"}}}}
	errs := te.Validate()
	if assert.Len(t, errs, 1) {
		assert.Equal(t, "spec.clientRegistration.keycloak.clientNameTemplate", errs[0].Field)
	}
	te.Spec.ClientRegistration.Keycloak.ClientNameTemplate = "{{.PodName}}"
	assert.Empty(t, te.Validate())
}

func TestRenderClientName(t *testing.T) {
	got, err := RenderClientName("agent-{{.Namespace}}-{{.PodName}}", ClientNameVars{PodName: "p-1", Namespace: "agents"})
	assert.NoError(t, err)
	assert.Equal(t, "agent-agents-p-1", got)
}
