package duck

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// Object is a Kagenti resource: its status embeds Status.
type Object interface {
	client.Object
	// GetStatus returns the embedded Status, for the StatusApplier to read and pillars to mark.
	GetStatus() *Status
}

// StatusApplier writes the status of a pillar's resources: by server-side apply under the pillar's
// field owner, of only the status fields and condition types the pillar owns, so that two
// controllers can share one status (netpol owns NetworkPolicyReady on AgentCards) and a user's or
// another controller's fields are never overwritten. Nothing is written when the owned part of the
// status is unchanged.
type StatusApplier struct {
	// Client writes the status; its scheme must know the resource's type.
	Client client.Client
	// FieldOwner is the pillar's field manager, kagenti-<pillar>.
	FieldOwner string
	// Recorder, when set, records an Event when Ready changes (see Apply).
	Recorder recorder.EventRecorder
	// Conditions are the condition types the pillar owns, besides Ready, Reconciling and Stalled.
	Conditions []string
	// ConditionsOnly is for a pillar that reports on another pillar's resource (netpol on
	// AgentCards): it owns Conditions and nothing else. Ready, Reconciling, Stalled,
	// observedGeneration and every other status field stay with the resource's own controller,
	// and the Events follow the first of Conditions instead of Ready.
	ConditionsOnly bool
	// RequireCurrent makes Apply send the resourceVersion of current, the object the status was
	// computed from, as a precondition: the API server refuses the write with a Conflict when the
	// stored object is newer. A reconcile that read its resource from a cache lagging behind the
	// controller's own previous status write would otherwise compute the conditions afresh (a new
	// lastTransitionTime for a Ready that never changed) and, with server-side apply's forced
	// ownership, overwrite the newer status. On a Conflict the caller looks again once its cache
	// has caught up (IsStale).
	RequireCurrent bool
	// NoFirstValueEvent makes only changes of the summary condition Events, never its first value
	// (whatever it is): for a pillar whose own Events already say how a resource starts
	// (agentbuild's BuildStarted, its precise template problem), where a first "Ready=False
	// Building" would be one more write per resource saying the same.
	NoFirstValueEvent bool
}

// IsStale reports whether err is Apply's refusal of a status computed from an older copy of the
// resource than the stored one (RequireCurrent): nothing was written, reconcile again after
// StaleRetry.
func IsStale(err error) bool { return apierrors.IsConflict(err) }

// StaleRetry is how soon a reconcile whose status write was refused as stale runs again: an
// informer cache is normally milliseconds behind, and a status-only change of the resource does
// not wake a reconciler filtered by generation.
const StaleRetry = 100 * time.Millisecond

// Apply writes desired's status when its owned part differs from current's (the resource as read
// at the start of the reconcile). After a successful write it records an Event when Ready (with
// ConditionsOnly, the first of Conditions) changed its status or reason: Warning when it is not
// True, Normal when it became True after having been something else. The condition's first value
// is an Event only when it is not True, so a thousand resources becoming ready at start-up record
// no Events, and every failure does.
func (a *StatusApplier) Apply(ctx context.Context, current, desired Object) error {
	have, err := a.ownedStatus(current)
	if err != nil {
		return err
	}
	want, err := a.ownedStatus(desired)
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(have, want) {
		return nil
	}
	gvk, err := apiutil.GVKForObject(desired, a.Client.Scheme())
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": want}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(desired.GetNamespace())
	u.SetName(desired.GetName())
	if a.RequireCurrent {
		u.SetResourceVersion(current.GetResourceVersion())
	}
	if err := a.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(a.FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying the status of %s %s/%s: %w", gvk.Kind, desired.GetNamespace(), desired.GetName(), err)
	}
	a.recordSummaryChange(current.GetStatus().Condition(a.summary()), desired)
	return nil
}

// ownedStatus is obj's status as an unstructured map with only the owned condition types.
func (a *StatusApplier) ownedStatus(obj Object) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	status, _ := m["status"].(map[string]any)
	if status == nil {
		return map[string]any{}, nil
	}
	conds, _ := status["conditions"].([]any)
	owned := make([]any, 0, len(conds))
	for _, c := range conds {
		if t, _ := c.(map[string]any)["type"].(string); a.owns(t) {
			owned = append(owned, c)
		}
	}
	if a.ConditionsOnly {
		status = map[string]any{}
	}
	if len(owned) == 0 {
		delete(status, "conditions")
	} else {
		status["conditions"] = owned
	}
	return status, nil
}

func (a *StatusApplier) owns(condType string) bool {
	switch condType {
	case ConditionReady, ConditionReconciling, ConditionStalled:
		if !a.ConditionsOnly {
			return true
		}
	}
	for _, t := range a.Conditions {
		if t == condType {
			return true
		}
	}
	return false
}

// summary is the condition whose changes are Events.
func (a *StatusApplier) summary() string {
	if a.ConditionsOnly && len(a.Conditions) > 0 {
		return a.Conditions[0]
	}
	return ConditionReady
}

func (a *StatusApplier) recordSummaryChange(before *metav1.Condition, obj Object) {
	now := obj.GetStatus().Condition(a.summary())
	if a.Recorder == nil || now == nil {
		return
	}
	switch {
	case before == nil && (now.Status == metav1.ConditionTrue || a.NoFirstValueEvent):
		return
	case before != nil && before.Status == now.Status && before.Reason == now.Reason:
		return
	}
	eventType := corev1.EventTypeWarning
	if now.Status == metav1.ConditionTrue {
		eventType = corev1.EventTypeNormal
	}
	a.Recorder.Eventf(obj, nil, eventType, now.Reason, "Reconcile", "%s", now.Message)
}
