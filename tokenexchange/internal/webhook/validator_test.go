package webhook

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

func withTemplate(tmpl string) *v1alpha1.TokenExchange {
	return &v1alpha1.TokenExchange{ObjectMeta: metav1.ObjectMeta{Name: "tx"}, Spec: v1alpha1.TokenExchangeSpec{
		ClientRegistration: &v1alpha1.ClientRegistrationSpec{Keycloak: &v1alpha1.KeycloakSpec{ClientNameTemplate: tmpl}}}}
}

func TestValidator(t *testing.T) {
	ctx := context.Background()
	v := Validator{}
	_, err := v.ValidateCreate(ctx, withTemplate("agent-{{.PodName}}"))
	assert.NoError(t, err)

	_, err = v.ValidateCreate(ctx, withTemplate("agent-{{.Secret}}"))
	assert.True(t, apierrors.IsInvalid(err))
	assert.Contains(t, err.Error(), "spec.clientRegistration.keycloak.clientNameTemplate")

	_, err = v.ValidateUpdate(ctx, withTemplate("ok"), withTemplate("{{"))
	assert.True(t, apierrors.IsInvalid(err))

	_, err = v.ValidateDelete(ctx, withTemplate("{{"))
	assert.NoError(t, err, "deleting is always allowed")
}
