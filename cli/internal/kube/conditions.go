package kube

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Condition is a status condition read from any object, whatever its kind: every Kagenti CR (and
// most of Kubernetes) keeps metav1.Condition-shaped entries in status.conditions. Reading them by
// type keeps the commands working when a pillar adds conditions (Reconciling, Stalled, …).
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
}

// Conditions returns status.conditions of u, in order.
func Conditions(u *unstructured.Unstructured) []Condition {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	out := make([]Condition, 0, len(raw))
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		c := Condition{Type: str(m["type"]), Status: str(m["status"]), Reason: str(m["reason"]), Message: str(m["message"]), LastTransitionTime: str(m["lastTransitionTime"])}
		switch g := m["observedGeneration"].(type) {
		case int64:
			c.ObservedGeneration = g
		case float64:
			c.ObservedGeneration = int64(g)
		}
		out = append(out, c)
	}
	return out
}

// FindCondition returns the condition of type typ, or nil.
func FindCondition(conds []Condition, typ string) *Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

func str(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	default:
		return fmt.Sprint(t)
	}
}
