package duck

import (
	"unique"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The condition types every Kagenti resource reports. Ready is the summary; Reconciling and Stalled
// follow the kstatus conventions (sigs.k8s.io/cli-utils/pkg/kstatus, read by Flux, Argo CD's
// health checks shipped in deploy/gitops and `kubectl wait`): they have "abnormal-true" polarity
// and are present only while True.
const (
	// ConditionReady is True when the resource does what its spec asks.
	ConditionReady = "Ready"
	// ConditionReconciling is True while the controller works towards the spec: kstatus InProgress.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when the controller cannot make progress without a change from the
	// user (invalid spec, conflict, unsupported kind, a required signature missing, a failed
	// build): kstatus Failed.
	ConditionStalled = "Stalled"
)

// Status is the duck type of a Kagenti resource's status, as Knative's duckv1.Status is of a
// Knative resource's: every pillar's status embeds it inline (duck.Status with json:",inline")
// and adds its own fields, and the resource's Status field carries
// `+kubebuilder:default={observedGeneration:0}`, so that the API server defaults a new resource's
// status and tools read a resource the controller has not seen yet as in progress (generation 1,
// observed 0) rather than current.
//
// +kubebuilder:object:generate=true
type Status struct {
	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	// +kubebuilder:default=0
	ObservedGeneration int64 `json:"observedGeneration"`

	// Conditions: Ready (the summary), Reconciling and Stalled (present only while True), and the
	// pillar's own. Each controller owns only the condition types it writes.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Observe records that this status describes generation; conditions set afterwards carry it.
func (s *Status) Observe(generation int64) { s.ObservedGeneration = generation }

// MarkReady sets Ready=True and clears Reconciling and Stalled.
func (s *Status) MarkReady(reason, message string) {
	s.Set(ConditionReady, metav1.ConditionTrue, reason, message)
	meta.RemoveStatusCondition(&s.Conditions, ConditionReconciling)
	meta.RemoveStatusCondition(&s.Conditions, ConditionStalled)
}

// MarkReconciling sets Ready=False and Reconciling=True with the same reason and message: the
// controller is working towards the spec, or waiting for something that will come by itself (pods
// to start, a workload to be created, a build to finish).
func (s *Status) MarkReconciling(reason, message string) {
	s.Set(ConditionReady, metav1.ConditionFalse, reason, message)
	s.Set(ConditionReconciling, metav1.ConditionTrue, reason, message)
	meta.RemoveStatusCondition(&s.Conditions, ConditionStalled)
}

// MarkStalled sets Ready=False and Stalled=True with the same reason and message: nothing changes
// until the user changes something.
func (s *Status) MarkStalled(reason, message string) {
	s.Set(ConditionReady, metav1.ConditionFalse, reason, message)
	s.Set(ConditionStalled, metav1.ConditionTrue, reason, message)
	meta.RemoveStatusCondition(&s.Conditions, ConditionReconciling)
}

// Set sets a condition for the observed generation. Its lastTransitionTime moves only when its
// status changes (meta.SetStatusCondition), so a status rewritten with the same verdict is equal
// to the stored one and is not written again.
func (s *Status) Set(condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: message, ObservedGeneration: s.ObservedGeneration,
	})
}

// Remove deletes the condition of the given type.
func (s *Status) Remove(condType string) { meta.RemoveStatusCondition(&s.Conditions, condType) }

// Condition returns the condition of the given type, or nil.
func (s *Status) Condition(condType string) *metav1.Condition {
	return meta.FindStatusCondition(s.Conditions, condType)
}

// IsTrue reports whether the condition of the given type is present and True.
func (s *Status) IsTrue(condType string) bool {
	c := s.Condition(condType)
	return c != nil && c.Status == metav1.ConditionTrue
}

// IsReady reports whether Ready is True for the current generation.
func (s *Status) IsReady() bool {
	c := s.Condition(ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue
}

// Compact rewrites s for a cache that holds it as long as its object exists: the conditions in a
// slice of exactly their number (the JSON decoder grows one by doubling, so five conditions held
// room for eight) and their type, status and reason strings shared with every other object's
// (unique.Make: the same few values on each). Call it on a freshly decoded object only (a cache
// transform): the conditions are rewritten in place.
func (s *Status) Compact() {
	if len(s.Conditions) == 0 {
		return
	}
	conds := make([]metav1.Condition, len(s.Conditions))
	for i, c := range s.Conditions {
		c.Type = unique.Make(c.Type).Value()
		c.Status = metav1.ConditionStatus(unique.Make(string(c.Status)).Value())
		c.Reason = unique.Make(c.Reason).Value()
		conds[i] = c
	}
	s.Conditions = conds
}
