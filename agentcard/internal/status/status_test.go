package status

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/card"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/testcards"
	"github.com/kagenti/platform/pkg/duck"
)

func served(t *testing.T, name string, created time.Time, version string, verified bool) PodResult {
	t.Helper()
	c, err := card.Parse(testcards.Weather(version))
	require.NoError(t, err)
	st := PodResult{
		PodName: name, PodIP: "10.0.0.1",
		Card: &Card{Hash: c.Hash, Name: c.Name, Version: c.Version, Status: c.Raw}, FetchStatus: v1alpha1.FetchSuccess, CreatedAt: created, ChangedAt: created,
	}
	if verified {
		st.Verify = signature.Result{Verified: true, Reason: signature.ReasonVerified, SpiffeID: "spiffe://td/x"}
		st.Binding = signature.BindingResult{Bound: true, Reason: signature.ReasonBound}
	} else {
		st.Verify = signature.Result{Reason: signature.ReasonNoSignature}
		st.Binding = signature.BindingResult{Reason: signature.ReasonNotVerified}
	}
	return st
}

func TestBuildStatusNewestWinsAndConditionsKeepTransitionTime(t *testing.T) {
	now := time.Now()
	c := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	pods := []PodResult{served(t, "old", now.Add(-time.Hour), "1.0.0", true), served(t, "new", now, "2.0.0", true)}
	st := Build(c, pods, nil, true, now)
	assert.Equal(t, v1alpha1.PhaseActive, st.Phase)
	assert.Contains(t, string(st.Card.Raw), `"2.0.0"`)
	assert.Equal(t, metav1.ConditionFalse, meta.FindStatusCondition(st.Conditions, "CardConsistent").Status)
	assert.Contains(t, meta.FindStatusCondition(st.Conditions, "CardConsistent").Message, "pods old serve a different card than the newest pod new")
	assert.EqualValues(t, 3, st.ObservedGeneration)

	// Same inputs later: equal status, transition times kept.
	c.Status = st
	for i := range c.Status.Conditions {
		c.Status.Conditions[i].LastTransitionTime = metav1.NewTime(now.Add(-time.Hour).Truncate(time.Second))
	}
	again := Build(c, pods, nil, true, now.Add(time.Minute))
	assert.True(t, Equal(c.Status, again), "an unchanged sync must not write")
	assert.Equal(t, c.Status.Conditions[0].LastTransitionTime, again.Conditions[0].LastTransitionTime)
}

func TestBuildStatusRequireSignature(t *testing.T) {
	c := &v1alpha1.AgentCard{}
	st := Build(c, []PodResult{served(t, "p", time.Now(), "1", false)}, nil, true, time.Now())
	assert.Equal(t, "SignatureRequired", meta.FindStatusCondition(st.Conditions, "Ready").Reason)
	st = Build(c, []PodResult{served(t, "p", time.Now(), "1", false)}, nil, false, time.Now())
	assert.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(st.Conditions, "Ready").Status, "unsigned is fine when not required")
	st = Build(c, nil, &SelectorError{Reason: "TargetNotFound", Message: "Deployment \"x\" not found"}, true, time.Now())
	assert.Equal(t, v1alpha1.PhasePending, st.Phase)
	assert.Equal(t, "TargetNotFound", meta.FindStatusCondition(st.Conditions, "Ready").Reason)
}

func TestBuildStatusVerdict(t *testing.T) {
	c := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	st := Build(c, []PodResult{served(t, "p", time.Now(), "1", true)}, nil, false, time.Now())
	v := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionVerified)
	require.NotNil(t, v)
	assert.Equal(t, metav1.ConditionTrue, v.Status)
	assert.EqualValues(t, 2, v.ObservedGeneration)
	assert.True(t, IsVerified(st))

	st = Build(c, []PodResult{served(t, "p", time.Now(), "1", false)}, nil, false, time.Now())
	assert.Equal(t, "NoSignature", meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionVerified).Reason)
	assert.False(t, IsVerified(st))

	// A binding the spec cannot have is the verdict's reason, before the signature's failure.
	notAllowed := served(t, "p", time.Now(), "1", false)
	notAllowed.Binding = signature.BindingResult{Reason: signature.ReasonIdentityNotAllowed, Message: "namespace rule"}
	st = Build(c, []PodResult{notAllowed}, nil, false, time.Now())
	assert.Equal(t, signature.ReasonIdentityNotAllowed, meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionVerified).Reason)

	// No card: not verified, for Ready's reason.
	failed := served(t, "p", time.Now(), "1", false)
	failed.Card, failed.FetchStatus, failed.Reason = nil, v1alpha1.FetchFailed, v1alpha1.ReasonCardTooLarge
	st = Build(c, []PodResult{failed}, nil, false, time.Now())
	assert.Equal(t, "False/CardTooLarge", string(meta.FindStatusCondition(st.Conditions, "Verified").Status)+"/"+meta.FindStatusCondition(st.Conditions, "Verified").Reason)
	assert.Equal(t, v1alpha1.ReasonCardTooLarge, meta.FindStatusCondition(st.Conditions, "Ready").Reason)
	assert.Equal(t, v1alpha1.ReasonCardTooLarge, meta.FindStatusCondition(st.Conditions, "Synced").Reason)
	st = Build(c, nil, &SelectorError{Reason: "TargetNotFound", Message: "x"}, false, time.Now())
	assert.Equal(t, "TargetNotFound", meta.FindStatusCondition(st.Conditions, "Verified").Reason)
}

func TestFailClosedStatusWithdrawsTheVerdict(t *testing.T) {
	c := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	c.Status = Build(c, []PodResult{served(t, "p", time.Now(), "1", true)}, nil, false, time.Now())
	require.True(t, IsVerified(c.Status))
	desired := Build(c, []PodResult{served(t, "p", time.Now(), "2", false)}, nil, false, time.Now())
	st := FailClosed(c, desired, fmt.Errorf("request entity too large"))
	assert.False(t, IsVerified(st))
	assert.Nil(t, st.Card)
	assert.Nil(t, st.Signature)
	assert.Equal(t, v1alpha1.PhaseError, st.Phase)
	for _, typ := range append([]string{v1alpha1.ConditionReady, duck.ConditionReconciling}, CardConditions...) {
		if typ == duck.ConditionReconciling {
			// The write is retried with backoff: in progress (kstatus InProgress), not stalled.
			assert.Equal(t, "True/"+v1alpha1.ReasonStatusWriteFailed, condString(st, typ))
			continue
		}
		cond := meta.FindStatusCondition(st.Conditions, typ)
		require.NotNil(t, cond, typ)
		assert.Equal(t, v1alpha1.ReasonStatusWriteFailed, cond.Reason, typ)
		assert.NotEqual(t, metav1.ConditionTrue, cond.Status, typ)
	}
	assert.Nil(t, st.Condition(duck.ConditionStalled))
	assert.Contains(t, meta.FindStatusCondition(st.Conditions, "Verified").Message, "request entity too large")
}

func condString(st v1alpha1.AgentCardStatus, typ string) string {
	c := st.Condition(typ)
	if c == nil {
		return "<none>"
	}
	return string(c.Status) + "/" + c.Reason
}

// Messages in status are bounded by their JSON-encoded size, as the API server counts them.
func TestCutEncoded(t *testing.T) {
	assert.Equal(t, "abc", CutEncoded("abc", 3))
	assert.Equal(t, "ab…", CutEncoded("abcd", 2))
	assert.Equal(t, "<…", CutEncoded("<<<", 6), "each < takes 6 bytes once encoded")
	assert.Equal(t, "é", CutEncoded("é", 2))
	assert.Equal(t, "…", CutEncoded("é", 1), "never cut inside a rune")
	assert.Equal(t, "a\uFFFD", CutEncoded("a\xff", 10), "invalid UTF-8 is replaced, as the encoder would")
	long := CutEncoded(strings.Repeat("<", 10000), MaxMessageBytes)
	b, err := json.Marshal(strings.TrimSuffix(long, "…"))
	require.NoError(t, err)
	assert.LessOrEqual(t, len(b)-2, MaxMessageBytes)
}
