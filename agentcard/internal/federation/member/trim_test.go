package member

import (
	"bytes"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
)

// Trim keeps every fact Exported reads, so that a member-only process sends exactly what it would
// send from untrimmed AgentCards, and nothing else (the spec, other conditions, messages).
func TestTrimKeepsWhatExportedReads(t *testing.T) {
	verified := func(gen int64, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: v1alpha1.ConditionVerified, Status: status, ObservedGeneration: gen,
			LastTransitionTime: metav1.NewTime(time.Unix(1_800_000_000, 0)), Reason: "SignatureVerified", Message: "a long message"}
	}
	card := func(mutate func(*v1alpha1.AgentCard)) *v1alpha1.AgentCard {
		c := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Name: "weather", Namespace: "agents", Generation: 3, ResourceVersion: "7",
			Labels: map[string]string{v1alpha1.LabelExport: "true", "app": "weather"}, Annotations: map[string]string{"a": "b"}}}
		c.Status.Conditions = []metav1.Condition{verified(3, metav1.ConditionTrue), {Type: "Ready", Status: metav1.ConditionTrue, Reason: "Synced"}}
		c.Status.Card = &runtime.RawExtension{Raw: []byte(`{"name":"weather"}`)}
		c.Status.Signature = &v1alpha1.SignatureStatus{SpiffeID: "spiffe://a.example/ns/agents/sa/weather"}
		if mutate != nil {
			mutate(c)
		}
		return c
	}
	for name, c := range map[string]*v1alpha1.AgentCard{
		"exported and verified":        card(nil),
		"not exported":                 card(func(c *v1alpha1.AgentCard) { delete(c.Labels, v1alpha1.LabelExport) }),
		"export false":                 card(func(c *v1alpha1.AgentCard) { c.Labels[v1alpha1.LabelExport] = "false" }),
		"not verified":                 card(func(c *v1alpha1.AgentCard) { c.Status.Conditions[0] = verified(3, metav1.ConditionFalse) }),
		"verified an older generation": card(func(c *v1alpha1.AgentCard) { c.Status.Conditions[0] = verified(2, metav1.ConditionTrue) }),
		"no signature":                 card(func(c *v1alpha1.AgentCard) { c.Status.Signature = nil }),
		"being deleted":                card(func(c *v1alpha1.AgentCard) { now := metav1.Now(); c.DeletionTimestamp = &now }),
	} {
		t.Run(name, func(t *testing.T) {
			wantCard, wantID, wantAt, wantOK := Exported(c)
			o, err := Trim(c.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			trimmed := o.(*v1alpha1.AgentCard)
			gotCard, gotID, gotAt, gotOK := Exported(trimmed)
			if gotOK != wantOK || !bytes.Equal(gotCard, wantCard) || gotID != wantID || !gotAt.Equal(wantAt) {
				t.Fatalf("Exported after Trim = %q %q %v %v, want %q %q %v %v", gotCard, gotID, gotAt, gotOK, wantCard, wantID, wantAt, wantOK)
			}
			if trimmed.Name != c.Name || trimmed.Namespace != c.Namespace || trimmed.ResourceVersion != c.ResourceVersion {
				t.Fatalf("identity lost: %+v", trimmed.ObjectMeta)
			}
			if len(trimmed.Annotations) > 0 || trimmed.Labels["app"] != "" || len(trimmed.Status.Conditions) > 1 ||
				(len(trimmed.Status.Conditions) == 1 && trimmed.Status.Conditions[0].Message != "") {
				t.Fatalf("kept what no one reads: %+v %+v", trimmed.ObjectMeta, trimmed.Status.Conditions)
			}
		})
	}
}
