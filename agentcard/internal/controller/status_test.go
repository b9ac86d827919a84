package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/card"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

func served(t *testing.T, name string, created time.Time, version string, verified bool) servedPod {
	t.Helper()
	c, err := card.Parse(testcards.Weather(version))
	require.NoError(t, err)
	st := &podState{card: c, fetchStatus: v1alpha1.FetchSuccess, createdAt: created, changedAt: created}
	if verified {
		st.verify = signature.Result{Verified: true, Reason: signature.ReasonVerified, SpiffeID: "spiffe://td/x"}
		st.binding = signature.BindingResult{Bound: true, Reason: signature.ReasonBound}
	} else {
		st.verify = signature.Result{Reason: signature.ReasonNoSignature}
		st.binding = signature.BindingResult{Reason: signature.ReasonNotVerified}
	}
	return servedPod{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{PodIP: "10.0.0.1"}}, state: st}
}

func TestBuildStatusNewestWinsAndConditionsKeepTransitionTime(t *testing.T) {
	now := time.Now()
	c := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	pods := []servedPod{served(t, "old", now.Add(-time.Hour), "1.0.0", true), served(t, "new", now, "2.0.0", true)}
	st := buildStatus(c, pods, nil, true, now)
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
	again := buildStatus(c, pods, nil, true, now.Add(time.Minute))
	assert.True(t, statusEqual(c.Status, again), "an unchanged sync must not write")
	assert.Equal(t, c.Status.Conditions[0].LastTransitionTime, again.Conditions[0].LastTransitionTime)
}

func TestBuildStatusRequireSignature(t *testing.T) {
	c := &v1alpha1.AgentCard{}
	st := buildStatus(c, []servedPod{served(t, "p", time.Now(), "1", false)}, nil, true, time.Now())
	assert.Equal(t, "SignatureRequired", meta.FindStatusCondition(st.Conditions, "Ready").Reason)
	st = buildStatus(c, []servedPod{served(t, "p", time.Now(), "1", false)}, nil, false, time.Now())
	assert.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(st.Conditions, "Ready").Status, "unsigned is fine when not required")
	st = buildStatus(c, nil, &selectorError{reason: "TargetNotFound", message: "Deployment \"x\" not found"}, true, time.Now())
	assert.Equal(t, v1alpha1.PhasePending, st.Phase)
	assert.Equal(t, "TargetNotFound", meta.FindStatusCondition(st.Conditions, "Ready").Reason)
}
