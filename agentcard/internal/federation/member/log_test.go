package member_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/federation/member"
)

func TestLogSendsOnlyWhatChangedAfterARevision(t *testing.T) {
	l := member.NewLog()
	l.Put("agents", "a", []byte(`{"v":1}`), "id", time.Now())
	l.Put("agents", "b", []byte(`{"v":1}`), "id", time.Now())
	l.Put("agents", "a", []byte(`{"v":1}`), "id", time.Now()) // unchanged: no revision
	require.EqualValues(t, 2, l.Head())
	l.Remove("agents", "b")
	l.Remove("agents", "never")
	require.EqualValues(t, 3, l.Head())

	frames, head := l.Since(2, false)
	require.EqualValues(t, 3, head)
	require.Len(t, frames, 1)
	require.NotNil(t, frames[0].Delete, "a tombstone after the revision")

	frames, _ = l.Since(0, true)
	require.Len(t, frames, 1, "a full resync carries the live cards only")
	require.Equal(t, "a", frames[0].Upsert.Name)

	l.Compact(3)
	frames, _ = l.Since(2, false)
	require.Empty(t, frames, "acknowledged tombstones are forgotten")
	require.Equal(t, 1, l.Len())
}

func TestOnlyExportedVerifiedCardsAreExported(t *testing.T) {
	card := func(mut func(*v1alpha1.AgentCard)) *v1alpha1.AgentCard {
		c := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "agents", Generation: 2, Labels: map[string]string{v1alpha1.LabelExport: "true"}}}
		c.Status.Card = &runtime.RawExtension{Raw: []byte(`{"name":"w"}`)}
		c.Status.Signature = &v1alpha1.SignatureStatus{Verified: true, SpiffeID: "spiffe://a/ns/agents/sa/w"}
		c.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionVerified, Status: metav1.ConditionTrue, ObservedGeneration: 2}}
		if mut != nil {
			mut(c)
		}
		return c
	}
	_, id, _, ok := member.Exported(card(nil))
	require.True(t, ok)
	require.Equal(t, "spiffe://a/ns/agents/sa/w", id)
	for name, mut := range map[string]func(*v1alpha1.AgentCard){
		"not labelled":                     func(c *v1alpha1.AgentCard) { c.Labels = nil },
		"labelled other than true":         func(c *v1alpha1.AgentCard) { c.Labels[v1alpha1.LabelExport] = "yes" },
		"not verified":                     func(c *v1alpha1.AgentCard) { c.Status.Conditions[0].Status = metav1.ConditionFalse },
		"verified for an older generation": func(c *v1alpha1.AgentCard) { c.Status.Conditions[0].ObservedGeneration = 1 },
		"no card":                          func(c *v1alpha1.AgentCard) { c.Status.Card = nil },
		"no signer":                        func(c *v1alpha1.AgentCard) { c.Status.Signature = nil },
	} {
		_, _, _, ok := member.Exported(card(mut))
		require.False(t, ok, name)
	}
}
