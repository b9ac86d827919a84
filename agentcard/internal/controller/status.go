package controller

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
)

// ownConditions are the condition types this controller writes; others (netpol's) are left alone.
var ownConditions = []string{
	v1alpha1.ConditionReady, v1alpha1.ConditionSynced, v1alpha1.ConditionSignatureVerified,
	v1alpha1.ConditionBound, v1alpha1.ConditionCardConsistent,
}

// servedPod pairs a ready pod with its sync result.
type servedPod struct {
	pod   *corev1.Pod
	state *podState
}

// buildStatus computes the desired status from the sync results. It is pure: conditions keep
// their lastTransitionTime from old when their status does not change.
func buildStatus(c *v1alpha1.AgentCard, pods []servedPod, selErr *selectorError, requireSig bool, now time.Time) v1alpha1.AgentCardStatus {
	old := c.Status
	st := v1alpha1.AgentCardStatus{ObservedGeneration: c.Generation, DiscoveredPods: int32(len(pods))}
	st.Conditions = append([]metav1.Condition(nil), old.Conditions...)
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: c.Generation})
	}
	unknownCardConds := func(reason, msg string) {
		set(v1alpha1.ConditionSignatureVerified, metav1.ConditionUnknown, reason, msg)
		set(v1alpha1.ConditionBound, metav1.ConditionUnknown, reason, msg)
		set(v1alpha1.ConditionCardConsistent, metav1.ConditionUnknown, reason, msg)
	}

	if selErr != nil {
		st.Phase = v1alpha1.PhaseError
		if selErr.reason == "TargetNotFound" {
			st.Phase = v1alpha1.PhasePending
		}
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, selErr.reason, selErr.message)
		set(v1alpha1.ConditionSynced, metav1.ConditionFalse, selErr.reason, selErr.message)
		unknownCardConds(selErr.reason, "no pods to fetch from")
		return st
	}

	oldEntries := map[string]v1alpha1.PodCard{}
	for _, e := range old.Cards {
		oldEntries[e.PodName] = e
	}
	var withCard, failed []servedPod
	for _, sp := range pods {
		s := sp.state
		e := v1alpha1.PodCard{PodName: sp.pod.Name, PodIP: sp.pod.Status.PodIP, URL: s.url, FetchStatus: s.fetchStatus, Error: truncate(s.errMsg, 1024), CardHash: hashOf(s.card)}
		t := metav1.NewTime(s.changedAt.Truncate(time.Second))
		if prev, ok := oldEntries[e.PodName]; ok && prev.LastFetchTime != nil && samePodEntry(prev, e) {
			t = *prev.LastFetchTime
		}
		e.LastFetchTime = &t
		st.Cards = append(st.Cards, e)
		if s.card != nil {
			withCard = append(withCard, sp)
		} else {
			failed = append(failed, sp)
		}
	}
	st.SyncErrors = int32(len(failed))

	// Synced: every ready pod answered with a valid card.
	switch {
	case len(pods) == 0:
		set(v1alpha1.ConditionSynced, metav1.ConditionFalse, "NoReadyPods", "no ready pod with an IP is selected")
	case len(failed) > 0:
		reason := "FetchFailed"
		if failed[0].state.fetchStatus == v1alpha1.FetchInvalid {
			reason = "InvalidCard"
		}
		set(v1alpha1.ConditionSynced, metav1.ConditionFalse, reason, podErrors(failed))
	default:
		set(v1alpha1.ConditionSynced, metav1.ConditionTrue, "Fetched", fmt.Sprintf("fetched the card from %d pod(s)", len(pods)))
	}

	if len(withCard) == 0 {
		st.Phase = v1alpha1.PhasePending
		reason, msg := "NoReadyPods", "no ready pod with an IP is selected"
		if len(pods) > 0 {
			st.Phase = v1alpha1.PhaseError
			reason, msg = "NoValidCard", podErrors(failed)
		}
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
		unknownCardConds(reason, "no card fetched")
		return st
	}

	// The newest pod's card wins (a rollout's new version); ties go to the pod name.
	sort.SliceStable(withCard, func(i, j int) bool {
		return withCard[i].state.createdAt.After(withCard[j].state.createdAt)
	})
	chosen := withCard[0].state
	st.Card = &runtime.RawExtension{Raw: compactJSON(chosen.card.Raw)}
	st.CardHash = chosen.card.Hash
	v, b := chosen.verify, chosen.binding
	st.Signature = &v1alpha1.SignatureStatus{Verified: v.Verified, KeyID: v.KeyID, SpiffeID: v.SpiffeID, Algorithm: v.Algorithm, Reason: v.Reason, Message: truncate(v.Message, 1024)}
	st.Binding = &v1alpha1.BindingStatus{Bound: b.Bound, ExpectedSpiffeID: b.Expected, Reason: b.Reason, Message: truncate(b.Message, 1024)}
	set(v1alpha1.ConditionSignatureVerified, boolStatus(v.Verified), v.Reason, truncate(v.Message, 1024))
	set(v1alpha1.ConditionBound, boolStatus(b.Bound), b.Reason, truncate(b.Message, 1024))

	var differ []string
	for _, sp := range withCard[1:] {
		if sp.state.card.Hash != chosen.card.Hash {
			differ = append(differ, sp.pod.Name)
		}
	}
	if len(differ) > 0 {
		sort.Strings(differ)
		set(v1alpha1.ConditionCardConsistent, metav1.ConditionFalse, "CardsDiffer",
			fmt.Sprintf("pods %s serve a different card than the newest pod %s, whose card is shown", strings.Join(differ, ", "), withCard[0].pod.Name))
	} else {
		set(v1alpha1.ConditionCardConsistent, metav1.ConditionTrue, "Consistent", fmt.Sprintf("%d pod(s) serve the same card", len(withCard)))
	}

	switch {
	case requireSig && !v.Verified:
		st.Phase = v1alpha1.PhaseError
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, "SignatureRequired", "a verified signature is required: "+truncate(v.Message, 900))
	case requireSig && !b.Bound:
		st.Phase = v1alpha1.PhaseError
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, "IdentityNotBound", "the signer must be the workload's identity: "+truncate(b.Message, 900))
	default:
		st.Phase = v1alpha1.PhaseActive
		msg := fmt.Sprintf("card %q version %q available", chosen.card.Name, chosen.card.Version)
		if !requireSig {
			msg += " (signature not required)"
		}
		set(v1alpha1.ConditionReady, metav1.ConditionTrue, "CardAvailable", msg)
	}
	return st
}

func samePodEntry(a, b v1alpha1.PodCard) bool {
	a.LastFetchTime, b.LastFetchTime = nil, nil
	return a == b
}

func podErrors(failed []servedPod) string {
	parts := make([]string, 0, len(failed))
	for i, sp := range failed {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(failed)-3))
			break
		}
		parts = append(parts, sp.pod.Name+": "+truncate(sp.state.errMsg, 300))
	}
	return strings.Join(parts, "; ")
}

func boolStatus(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func compactJSON(raw []byte) []byte {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return raw
	}
	b, _ := json.Marshal(v)
	return b
}

// statusEqual compares two statuses the way the API server would store them, ignoring timestamps
// that only move when something else changed, the card body (its hash is compared) and other
// controllers' conditions.
func statusEqual(a, b v1alpha1.AgentCardStatus) bool {
	return equality.Semantic.DeepEqual(normalize(a), normalize(b))
}

func normalize(s v1alpha1.AgentCardStatus) v1alpha1.AgentCardStatus {
	s = *s.DeepCopy()
	s.LastSyncTime, s.Card = nil, nil
	for i := range s.Cards {
		s.Cards[i].LastFetchTime = nil
	}
	if len(s.Cards) == 0 {
		s.Cards = nil
	}
	var conds []metav1.Condition
	for _, t := range ownConditions {
		if c := meta.FindStatusCondition(s.Conditions, t); c != nil {
			cc := *c
			cc.LastTransitionTime = metav1.Time{}
			conds = append(conds, cc)
		}
	}
	s.Conditions = conds
	return s
}
