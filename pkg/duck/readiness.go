package duck

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Readiness summarises how far a workload is from serving.
type Readiness struct {
	// Ready is true when the workload does what it is meant to: all desired replicas ready, a Job
	// complete, a CronJob not failing, a custom kind with condition Ready=True.
	Ready bool
	// Desired and ReadyReplicas count pods where the kind has replicas.
	Desired       int64
	ReadyReplicas int64
	// Message is a short human summary, e.g. "2/3 replicas ready".
	Message string
}

// Readiness summarises the workload's status as its controller last reported it.
func (w *Workload) Readiness() Readiness { return w.kind.readiness(w.obj) }

func nestedInt(u *unstructured.Unstructured, fields ...string) (int64, bool) {
	v, found, err := unstructured.NestedFieldNoCopy(u.Object, fields...)
	if err != nil || !found {
		return 0, false
	}
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int:
		return int64(n), true
	case float64:
		return int64(n), true
	}
	return 0, false
}

func replicas(u *unstructured.Unstructured) int64 {
	if n, ok := nestedInt(u, "spec", "replicas"); ok {
		return n
	}
	return 1 // the API server's default for every kind with spec.replicas
}

// observedCurrent is false while the workload's controller has not seen the latest spec.
func observedCurrent(u *unstructured.Unstructured) bool {
	og, ok := nestedInt(u, "status", "observedGeneration")
	return !ok || og >= u.GetGeneration()
}

func replicaSummary(u *unstructured.Unstructured, desired int64, readyField ...string) Readiness {
	ready, _ := nestedInt(u, readyField...)
	r := Readiness{Desired: desired, ReadyReplicas: ready, Message: fmt.Sprintf("%d/%d replicas ready", ready, desired)}
	r.Ready = ready >= desired && observedCurrent(u)
	return r
}

func deploymentReadiness(u *unstructured.Unstructured) Readiness {
	r := replicaSummary(u, replicas(u), "status", "readyReplicas")
	if updated, _ := nestedInt(u, "status", "updatedReplicas"); r.Ready && updated < r.Desired {
		r.Ready = false
		r.Message = fmt.Sprintf("rollout in progress: %d/%d replicas updated", updated, r.Desired)
	}
	return r
}

func replicaReadiness(u *unstructured.Unstructured) Readiness {
	return replicaSummary(u, replicas(u), "status", "readyReplicas")
}

func daemonSetReadiness(u *unstructured.Unstructured) Readiness {
	desired, _ := nestedInt(u, "status", "desiredNumberScheduled")
	return replicaSummary(u, desired, "status", "numberReady")
}

func jobReadiness(u *unstructured.Unstructured) Readiness {
	succeeded, _ := nestedInt(u, "status", "succeeded")
	active, _ := nestedInt(u, "status", "active")
	r := Readiness{ReadyReplicas: active, Desired: active}
	switch {
	case hasCondition(u, "Complete"):
		r.Ready, r.Message = true, fmt.Sprintf("complete (%d succeeded)", succeeded)
	case hasCondition(u, "Failed"):
		r.Message = "failed"
	default:
		r.Message = fmt.Sprintf("running: %d active, %d succeeded", active, succeeded)
	}
	return r
}

func cronJobReadiness(u *unstructured.Unstructured) Readiness {
	active, _, _ := unstructured.NestedSlice(u.Object, "status", "active")
	if suspended, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend"); suspended {
		return Readiness{Message: "suspended"}
	}
	return Readiness{Ready: true, Desired: int64(len(active)), ReadyReplicas: int64(len(active)),
		Message: fmt.Sprintf("scheduled, %d active jobs", len(active))}
}

// customReadiness follows Knative's duckv1.Status: condition Ready, with readyReplicas if reported.
func customReadiness(u *unstructured.Unstructured) Readiness {
	r := Readiness{Message: "no readiness reported"}
	if _, ok := nestedInt(u, "status", "readyReplicas"); ok {
		r = replicaSummary(u, replicas(u), "status", "readyReplicas")
	}
	if status, found := conditionStatus(u, "Ready"); found {
		r.Ready = status == "True" && observedCurrent(u)
		r.Message = "condition Ready=" + status
	}
	return r
}

func hasCondition(u *unstructured.Unstructured, condType string) bool {
	s, ok := conditionStatus(u, condType)
	return ok && s == "True"
}

func conditionStatus(u *unstructured.Unstructured, condType string) (string, bool) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		if m["type"] == condType {
			s, _ := m["status"].(string)
			return s, true
		}
	}
	return "", false
}
