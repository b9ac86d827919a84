package resources

import (
	"errors"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/params"
	"github.com/kagenti/platform/agentbuild/internal/templates"
)

// Reason maps a loading or rendering error to the TemplateResolved condition's reason; "" means
// the error is not the user's to fix (an API error) and should be retried.
func Reason(err error) string {
	var te *templates.Error
	var me *params.MissingError
	switch {
	case errors.As(err, &te):
		return te.Reason
	case errors.As(err, &me):
		return v1alpha1.ReasonMissingParameter
	}
	return ""
}
