// Package webhook serves the validating admission webhook for TokenExchange: the clientNameTemplate
// check of v1alpha1.(*TokenExchange).Validate. The current CRD has the same rule in CEL, so the
// webhook matters where the installed CRD is older than the controller (helm never upgrades CRDs);
// the controller repeats the check (Ready=False, reason InvalidSpec) for objects stored before.
package webhook

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// Path is where the webhook is served (controller-runtime's convention for the type).
const Path = "/validate-kagenti-io-v1alpha1-tokenexchange"

// Validator rejects TokenExchanges whose spec fails v1alpha1.(*TokenExchange).Validate.
type Validator struct{}

var _ admission.Validator[*v1alpha1.TokenExchange] = Validator{}

func (Validator) ValidateCreate(_ context.Context, te *v1alpha1.TokenExchange) (admission.Warnings, error) {
	return nil, validate(te)
}

func (Validator) ValidateUpdate(_ context.Context, _, te *v1alpha1.TokenExchange) (admission.Warnings, error) {
	return nil, validate(te)
}

func (Validator) ValidateDelete(context.Context, *v1alpha1.TokenExchange) (admission.Warnings, error) {
	return nil, nil
}

func validate(te *v1alpha1.TokenExchange) error {
	if errs := te.Validate(); len(errs) > 0 {
		return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("TokenExchange").GroupKind(), te.Name, errs)
	}
	return nil
}
