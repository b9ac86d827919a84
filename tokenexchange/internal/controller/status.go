package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// FieldManager owns the status fields this controller writes (server-side apply).
const FieldManager = "kagenti-tokenexchange"

// writeStatus applies the computed status when it differs from the stored one, and records an
// Event when the Ready condition changes reason, so every failure a user can fix is also an Event.
func (r *Reconciler) writeStatus(ctx context.Context, te *v1alpha1.TokenExchange, st *status) error {
	if statusEqual(te.Status, st.s) {
		return nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st.s)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": m}}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("TokenExchange"))
	u.SetNamespace(te.Namespace)
	u.SetName(te.Name)
	if err := r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return err
	}
	r.recordReadyChange(te, st)
	return nil
}

func (r *Reconciler) recordReadyChange(te *v1alpha1.TokenExchange, st *status) {
	now := meta.FindStatusCondition(st.s.Conditions, v1alpha1.ConditionReady)
	if now == nil {
		return
	}
	before := meta.FindStatusCondition(te.Status.Conditions, v1alpha1.ConditionReady)
	if before != nil && before.Status == now.Status && before.Reason == now.Reason {
		return
	}
	eventType := corev1.EventTypeWarning
	if now.Status == "True" {
		eventType = corev1.EventTypeNormal
	}
	r.Recorder.Eventf(te, nil, eventType, now.Reason, "Reconcile", "%s", now.Message)
}

// statusEqual compares the fields this controller owns; conditions of other managers are ignored.
func statusEqual(have, want v1alpha1.TokenExchangeStatus) bool {
	var own []metav1.Condition
	for _, c := range have.Conditions {
		for _, t := range ownConditions {
			if c.Type == t {
				own = append(own, c)
			}
		}
	}
	have.Conditions = own
	return equality.Semantic.DeepEqual(normalize(have), normalize(want))
}

func normalize(s v1alpha1.TokenExchangeStatus) v1alpha1.TokenExchangeStatus {
	if len(s.Conditions) == 0 {
		s.Conditions = nil
	}
	for i := range s.Conditions { // the API server stores seconds
		s.Conditions[i].LastTransitionTime.Time = s.Conditions[i].LastTransitionTime.Truncate(1e9).UTC()
	}
	return s
}
