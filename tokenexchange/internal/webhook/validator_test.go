package webhook

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

func withTemplate(tmpl string) *v1alpha1.TokenExchange {
	return &v1alpha1.TokenExchange{ObjectMeta: metav1.ObjectMeta{Name: "tx"}, Spec: v1alpha1.TokenExchangeSpec{
		ClientRegistration: &v1alpha1.ClientRegistrationSpec{Keycloak: &v1alpha1.KeycloakSpec{ClientNameTemplate: tmpl}}}}
}

// templateBomb is the template of issue 12 that made Go's text/template allocate 6 GB.
func templateBomb(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "api", "v1alpha1", "testdata", "template-bomb.txt"))
	require.NoError(t, err)
	return string(b)
}

func TestValidator(t *testing.T) {
	ctx := context.Background()
	v := Validator{}
	_, err := v.ValidateCreate(ctx, withTemplate("{{.Namespace}}/agent-{{.PodName}}"))
	assert.NoError(t, err)

	// Issue 26: team-a naming team-b's client, or any name that does not start with the namespace.
	for _, tmpl := range []string{"team-b/agent", "agent-{{.PodName}}"} {
		_, err = v.ValidateCreate(ctx, withTemplate(tmpl))
		assert.True(t, apierrors.IsInvalid(err), tmpl)
		assert.ErrorContains(t, err, `spec.clientRegistration.keycloak.clientNameTemplate: Invalid value: "`+tmpl+`": must start with {{.Namespace}} followed by '/'`)
	}

	_, err = v.ValidateCreate(ctx, withTemplate("agent-{{.Secret}}"))
	assert.True(t, apierrors.IsInvalid(err))
	assert.Contains(t, err.Error(), "spec.clientRegistration.keycloak.clientNameTemplate")

	// Rejected by parsing, never executed (text/template allocated 6 GB for it).
	_, err = v.ValidateCreate(ctx, withTemplate(templateBomb(t)))
	assert.True(t, apierrors.IsInvalid(err))
	assert.Contains(t, err.Error(), "not a placeholder")

	_, err = v.ValidateUpdate(ctx, withTemplate("ok"), withTemplate("{{"))
	assert.True(t, apierrors.IsInvalid(err))

	_, err = v.ValidateDelete(ctx, withTemplate("{{"))
	assert.NoError(t, err, "deleting is always allowed")
}
