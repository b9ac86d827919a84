package controller

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// status is the desired status being computed for one reconcile. It starts from the stored one, so
// that condition transition times survive (duck.Status.Set moves them only on a change) and the
// StatusApplier writes nothing when the verdict is the same.
type status struct {
	*v1alpha1.TokenExchangeStatus
	// verdict is set once this reconcile has decided Ready: only then is the status written, so a
	// reconcile that fails on an API error never presents an older verdict as this generation's.
	verdict *bool
	// setTypes are the conditions this reconcile set (see dropUnset).
	setTypes map[string]bool
}

// propagationConditions are set only when the reconcile reached the pods.
var propagationConditions = []string{v1alpha1.ConditionConfigPropagated, v1alpha1.ConditionStartupSettingsCurrent}

// newStatus points at desired's status, which describes desired's generation from now on.
func newStatus(desired *v1alpha1.TokenExchange) status {
	s := status{TokenExchangeStatus: &desired.Status, verdict: new(bool), setTypes: map[string]bool{}}
	s.Observe(desired.Generation)
	s.Phase, s.Message, s.ConfigMapName, s.IdentityStatus = "", "", "", nil
	s.Pods, s.ConfiguredPods, s.ContentHash = 0, 0, ""
	return s
}

func (s status) hasVerdict() bool { return *s.verdict }

func (s status) set(condType string, ok bool, reason, msg string) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	s.Set(condType, st, reason, truncate(msg))
	s.setTypes[condType] = true
}

// dropUnset removes the conditions of these types that this reconcile did not set (stale ones).
func (s status) dropUnset(types ...string) {
	for _, t := range types {
		if !s.setTypes[t] {
			s.Remove(t)
		}
	}
}

// targetNotResolved: a missing workload is Reconciling (Pending; the workload is watched), an
// unsupported or invalid reference Stalled (Error).
func (s status) targetNotResolved(reason, msg string) {
	s.set(v1alpha1.ConditionTargetResolved, false, reason, msg)
	s.set(v1alpha1.ConditionConfigMapReady, false, v1alpha1.ReasonWaitingForTarget, "waiting for the target workload")
	if reason == duck.ReasonTargetNotFound {
		s.reconciling(v1alpha1.PhasePending, reason, msg)
		return
	}
	s.stalled(v1alpha1.PhaseError, reason, msg)
}

// noSelector: the workload's pod selector cannot be read, so its pods cannot be found.
func (s status) noSelector(err error) {
	s.set(v1alpha1.ConditionTargetResolved, false, duck.ReasonOf(err), err.Error())
	s.stalled(v1alpha1.PhaseError, duck.ReasonUnsupportedKind, err.Error())
}

func (s status) conflict(winner string, ref duck.TargetRef) {
	msg := fmt.Sprintf("TokenExchange %q, created earlier, already configures %s; this one writes nothing until it is deleted", winner, ref)
	s.set(v1alpha1.ConditionConfigMapReady, false, v1alpha1.ReasonConflict, msg)
	s.stalled(v1alpha1.PhaseError, v1alpha1.ReasonConflict, msg)
}

func (s status) invalidSpec(msg string) {
	s.set(v1alpha1.ConditionConfigMapReady, false, v1alpha1.ReasonInvalidSpec, "not written: "+msg)
	s.stalled(v1alpha1.PhaseError, v1alpha1.ReasonInvalidSpec, msg)
}

// configMapFailed reports a ConfigMap that could not be written: Stalled when someone else's
// ConfigMap has the name, Reconciling when the write is retried.
func (s status) configMapFailed(reason, msg string) {
	s.set(v1alpha1.ConditionConfigMapReady, false, reason, msg)
	if reason == v1alpha1.ReasonConfigMapNotOwned {
		s.stalled(v1alpha1.PhaseError, reason, msg)
		return
	}
	s.reconciling(v1alpha1.PhaseError, reason, msg)
}

// notInjected: the ConfigMap is written but inert until the injector mounts it, which it does only
// when the workload is created or updated with its label: Stalled until the user does that.
func (s status) notInjected(msg string) {
	s.stalled(v1alpha1.PhasePending, v1alpha1.ReasonNotInjected, msg)
}

func (s status) ready(msg string) {
	s.Phase, s.Message = v1alpha1.PhaseActive, truncate(msg)
	s.MarkReady(v1alpha1.ReasonConfigured, truncate(msg))
	*s.verdict = true
}

func (s status) reconciling(phase, reason, msg string) {
	s.Phase, s.Message = phase, truncate(msg)
	s.MarkReconciling(reason, truncate(msg))
	*s.verdict = true
}

func (s status) stalled(phase, reason, msg string) {
	s.Phase, s.Message = phase, truncate(msg)
	s.MarkStalled(reason, truncate(msg))
	*s.verdict = true
}

func truncate(s string) string {
	const max = 2048
	if len(s) > max {
		return s[:max-3] + "..."
	}
	return s
}
