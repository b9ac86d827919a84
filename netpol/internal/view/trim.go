package view

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kagenti/platform/netpol/api"
)

// lastApplied is kubectl's copy of the whole object in an annotation.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// TrimAgentCard is the cache transform of AgentCards: it keeps what netpol reads — metadata
// (without managedFields and kubectl's last-applied copy), spec.targetRef, spec.selector,
// status.observedGeneration, and of status.conditions agentcard's Verified (the verdict) and
// netpol's own NetworkPolicyReady — and drops the rest, above all the A2A card agentcard copies
// into status.card, the per-pod fetch results and agentcard's other conditions. A cached AgentCard
// is decoded into nested maps, several times the size of its JSON; netpol reads a few hundred
// bytes of it. Objects that are not unstructured pass through unchanged.
func TrimAgentCard(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	trimmed := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(),
		"kind":       u.GetKind(),
		"metadata":   u.Object["metadata"], // u is fresh from the decoder and discarded: shared
	}}
	if _, found := u.Object["metadata"]; found {
		trimmed.SetManagedFields(nil)
		if a := trimmed.GetAnnotations(); a[lastApplied] != "" {
			delete(a, lastApplied)
			trimmed.SetAnnotations(a)
		}
	}
	keep(u, trimmed, "spec", "targetRef", "selector")
	keep(u, trimmed, "status", "observedGeneration", "conditions")
	if status, ok := trimmed.Object["status"].(map[string]any); ok { // keep's own map
		if list, ok := status["conditions"].([]any); ok {
			status["conditions"] = readConditions(list)
		}
	}
	return trimmed, nil
}

// readConditions are the conditions netpol reads, of all those on an AgentCard.
func readConditions(conds []any) []any {
	out := make([]any, 0, 2)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if t, _ := m["type"].(string); t == ConditionVerified || t == api.ConditionNetworkPolicyReady {
			out = append(out, c)
		}
	}
	return out
}

// keep copies the named fields of the map at from.Object[field] into to.Object[field].
func keep(from, to *unstructured.Unstructured, field string, names ...string) {
	m, ok := from.Object[field].(map[string]any)
	if !ok {
		return
	}
	out := map[string]any{}
	for _, name := range names {
		if v, found := m[name]; found {
			out[name] = v
		}
	}
	if len(out) > 0 {
		to.Object[field] = out
	}
}
