package controller

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/status"
	"github.com/kagenti/platform/pkg/duck"
)

// podSelector returns the label selector of the card's pods: the workload's (targetRef mode) or
// spec.selector.
func (r *CardReconciler) podSelector(ctx context.Context, c *v1alpha1.AgentCard) (labels.Selector, error) {
	if c.Spec.TargetRef != nil {
		w, err := r.Resolver.Resolve(ctx, c.Namespace, *c.Spec.TargetRef)
		if err != nil {
			if reason := duck.ReasonOf(err); reason != "" {
				return nil, &status.SelectorError{Reason: reason, Message: err.Error()}
			}
			return nil, err
		}
		sel, err := w.Selector()
		if err != nil {
			if reason := duck.ReasonOf(err); reason != "" {
				return nil, &status.SelectorError{Reason: reason, Message: err.Error()}
			}
			return nil, &status.SelectorError{Reason: duck.ReasonUnsupportedKind, Message: err.Error()}
		}
		return sel, nil
	}
	if c.Spec.Selector == nil {
		return nil, &status.SelectorError{Reason: v1alpha1.ReasonInvalidSelector, Message: "spec.selector or spec.targetRef is required"}
	}
	sel, err := metav1.LabelSelectorAsSelector(c.Spec.Selector)
	if err != nil {
		return nil, &status.SelectorError{Reason: v1alpha1.ReasonInvalidSelector, Message: fmt.Sprintf("spec.selector: %v", err)}
	}
	if sel.Empty() {
		return nil, &status.SelectorError{Reason: v1alpha1.ReasonInvalidSelector, Message: "spec.selector must not be empty (it would select every pod in the namespace)"}
	}
	return sel, nil
}
