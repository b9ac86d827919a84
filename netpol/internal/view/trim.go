package view

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// lastApplied is kubectl's copy of the whole object in an annotation.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// TrimAgentCard is the cache transform of AgentCards: it keeps what FromUnstructured and StatusOf
// read — metadata (without managedFields and kubectl's last-applied copy), spec.targetRef,
// spec.selector, status.observedGeneration and status.conditions — and drops the rest, above all
// the A2A card agentcard copies into status.card and the per-pod fetch results. A cached
// AgentCard is decoded into nested maps, several times the size of its JSON; netpol reads a few
// hundred bytes of it. Objects that are not unstructured pass through unchanged.
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
	return trimmed, nil
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
