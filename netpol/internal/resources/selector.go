package resources

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kagenti/platform/pkg/duck"
)

// WorkloadPodSelector is the pod selector of a workload's pods, for any PodSpecable kind:
// spec.selector where the pod template sits at spec.template (Deployment, StatefulSet, DaemonSet,
// ReplicaSet, Job, custom kinds) — it selects old and new pods alike during a rollout — and the pod
// template's labels otherwise (CronJob, kinds without a selector).
func WorkloadPodSelector(w *duck.Workload) (metav1.LabelSelector, error) {
	tp := w.TemplatePath()
	if len(tp) == 2 && tp[0] == "spec" && tp[1] == "template" {
		m, found, err := unstructured.NestedMap(w.Object().Object, "spec", "selector")
		if err == nil && found && len(m) > 0 {
			var ls metav1.LabelSelector
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ls); err != nil {
				return metav1.LabelSelector{}, fmt.Errorf("reading spec.selector of %s %q: %w", w.Kind(), w.Name(), err)
			}
			if !IsEmptySelector(ls) {
				return ls, nil
			}
		}
	}
	labels, err := w.PodLabels()
	if err != nil {
		return metav1.LabelSelector{}, err
	}
	if len(labels) == 0 {
		return metav1.LabelSelector{}, &duck.Error{Reason: duck.ReasonUnsupportedKind,
			Message: fmt.Sprintf("%s %q has neither spec.selector nor pod template labels to select its pods", w.Kind(), w.Name())}
	}
	return metav1.LabelSelector{MatchLabels: copyMap(labels)}, nil
}

// IsEmptySelector is true for a selector that selects every pod of the namespace.
func IsEmptySelector(ls metav1.LabelSelector) bool {
	return len(ls.MatchLabels) == 0 && len(ls.MatchExpressions) == 0
}
