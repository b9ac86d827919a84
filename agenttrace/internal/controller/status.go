package controller

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/pkg/duck"
)

// status is the desired status being computed for one reconcile. It starts from the stored one, so
// that condition transition times survive (duck.Status.Set moves them only on a change) and the
// StatusApplier writes nothing when the verdict is the same.
type status struct {
	*v1alpha1.AgentTraceStatus
	// verdict is set once this reconcile has decided Ready: only then is the status written, so a
	// reconcile that fails on an API error never presents an older verdict as this generation's.
	verdict *bool
	// reported: the stored status already described this generation with this Ready reason, the
	// moment warnings were last recorded as Events.
	reportedGeneration int64
	reportedReason     string
}

// newStatus points at desired's status, which describes desired's generation from now on.
func newStatus(desired *v1alpha1.AgentTrace) status {
	s := status{AgentTraceStatus: &desired.Status, verdict: new(bool), reportedGeneration: desired.Status.ObservedGeneration}
	if c := desired.Status.Condition(v1alpha1.ConditionReady); c != nil {
		s.reportedReason = c.Reason
	}
	s.Observe(desired.Generation)
	s.Phase, s.ConfigMapName, s.ConfiguredPods = "", "", 0
	return s
}

func (s status) hasVerdict() bool { return *s.verdict }

// targetNotResolved: a missing workload is Reconciling (Pending; the workload is watched), an
// unsupported or invalid reference Stalled (Error).
func (s status) targetNotResolved(reason, msg string) {
	s.Set(v1alpha1.ConditionTargetResolved, metav1.ConditionFalse, reason, msg)
	s.Set(v1alpha1.ConditionConfigMapReady, metav1.ConditionUnknown, v1alpha1.ReasonTargetNotResolved, "waiting for the target")
	if reason == duck.ReasonTargetNotFound {
		s.reconciling(v1alpha1.PhasePending, reason, msg)
		return
	}
	s.stalled(reason, msg)
}

func (s status) targetResolved(w *duck.Workload) {
	s.Set(v1alpha1.ConditionTargetResolved, metav1.ConditionTrue, v1alpha1.ReasonResolved, fmt.Sprintf("%s %q", w.Kind(), w.Name()))
}

func (s status) conflict(winner string, w *duck.Workload) {
	msg := fmt.Sprintf("AgentTrace %q already configures %s %q (the oldest AgentTrace of a target wins); this one writes nothing until it is removed",
		winner, w.Kind(), w.Name())
	s.Set(v1alpha1.ConditionConfigMapReady, metav1.ConditionFalse, v1alpha1.ReasonConflict, msg)
	s.stalled(v1alpha1.ReasonConflict, msg)
}

// configMapFailed reports a ConfigMap that could not be written: Stalled when someone else's
// ConfigMap has the name, Reconciling when the write is retried.
func (s status) configMapFailed(name, reason, msg string) {
	s.ConfigMapName = name
	s.Set(v1alpha1.ConditionConfigMapReady, metav1.ConditionFalse, reason, msg)
	if reason == v1alpha1.ReasonConfigMapNotOwned {
		s.stalled(reason, msg)
		return
	}
	s.reconciling(v1alpha1.PhaseError, reason, msg)
}

func (s status) configMapApplied(name string) {
	s.ConfigMapName = name
	s.Set(v1alpha1.ConditionConfigMapReady, metav1.ConditionTrue, v1alpha1.ReasonConfigMapApplied,
		fmt.Sprintf("ConfigMap %s holds the configuration of generation %d", name, s.ObservedGeneration))
}

// warning is something Ready=True reports without failing: the agent may not see the files yet, or
// an exporter is deprecated.
type warning struct{ reason, message string }

// active sets Ready=True with the first warning's reason (Active without one), every warning
// appended to the message.
func (s status) active(pods int32, warnings []warning) {
	s.Phase, s.ConfiguredPods = v1alpha1.PhaseActive, pods
	reason, msg := v1alpha1.ReasonActive, fmt.Sprintf("%s is up to date; %d running pod(s) mount it", s.ConfigMapName, pods)
	if len(warnings) > 0 {
		reason = warnings[0].reason
	}
	for _, w := range warnings {
		msg += "; " + w.message
	}
	s.MarkReady(reason, msg)
	*s.verdict = true
}

// reportWarnings is true when warnings are news: a new generation or a new Ready reason. Warnings
// become Events then, not once per pod event.
func (s status) reportWarnings() bool {
	return s.reportedGeneration != s.ObservedGeneration || s.reportedReason != s.Condition(v1alpha1.ConditionReady).Reason
}

func (s status) reconciling(phase v1alpha1.Phase, reason, msg string) {
	s.Phase = phase
	s.MarkReconciling(reason, msg)
	*s.verdict = true
}

func (s status) stalled(reason, msg string) {
	s.Phase = v1alpha1.PhaseError
	s.MarkStalled(reason, msg)
	*s.verdict = true
}
