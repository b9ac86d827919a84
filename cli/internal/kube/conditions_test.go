package kube

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Conditions are read by type from any object, whatever the number type its decoder gave
// observedGeneration (int64 from the API machinery, float64 from encoding/json); entries that are
// not objects are skipped, values that are not strings are printed.
func TestConditionsOfAnyObject(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "Ready", "status": "True", "reason": "CardAvailable", "message": "ok", "observedGeneration": int64(3), "lastTransitionTime": "2026-01-01T00:00:00Z"},
		"not a condition",
		map[string]any{"type": "Synced", "status": false, "observedGeneration": float64(2)},
		map[string]any{"type": "Stalled"},
	}}}}
	conds := Conditions(u)
	assert.Equal(t, []Condition{
		{Type: "Ready", Status: "True", Reason: "CardAvailable", Message: "ok", ObservedGeneration: 3, LastTransitionTime: "2026-01-01T00:00:00Z"},
		{Type: "Synced", Status: "false", ObservedGeneration: 2},
		{Type: "Stalled"},
	}, conds)
	assert.Equal(t, "CardAvailable", FindCondition(conds, "Ready").Reason)
	assert.Nil(t, FindCondition(conds, "Verified"))

	assert.Empty(t, Conditions(&unstructured.Unstructured{Object: map[string]any{}}), "no status")
	assert.Empty(t, Conditions(&unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": "garbage"}}}))
}
