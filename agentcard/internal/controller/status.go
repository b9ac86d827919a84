package controller

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/pkg/duck"
)

// cardConditions are agentcard's own condition types besides Ready, Reconciling and Stalled (which
// the StatusApplier owns for every pillar); others (netpol's NetworkPolicyReady) are left alone.
var cardConditions = []string{
	v1alpha1.ConditionSynced, v1alpha1.ConditionSignatureVerified,
	v1alpha1.ConditionBound, v1alpha1.ConditionVerified, v1alpha1.ConditionCardConsistent,
}

// ownConditions are every condition type this controller writes.
var ownConditions = append([]string{duck.ConditionReady, duck.ConditionReconciling, duck.ConditionStalled}, cardConditions...)

// Bounds of the text written to status, in JSON-encoded bytes (what the API server receives).
const (
	maxMessageBytes    = 1024
	maxEntryErrorBytes = 512
	maxKeyIDBytes      = 256
	maxSpiffeIDBytes   = 2048
)

// servedPod pairs a ready pod with its sync result.
type servedPod struct {
	pod   *corev1.Pod
	state *podState
}

// buildStatus computes the desired status from the sync results. It is pure: conditions keep
// their lastTransitionTime from old when their status does not change.
func buildStatus(c *v1alpha1.AgentCard, pods []servedPod, selErr *selectorError, requireSig bool, now time.Time) v1alpha1.AgentCardStatus {
	old := c.Status
	st := v1alpha1.AgentCardStatus{DiscoveredPods: int32(len(pods))}
	st.Conditions = append([]metav1.Condition(nil), old.Conditions...)
	st.Observe(c.Generation)
	set := st.Set
	// Without a card there is nothing to verify: the verdict is negative, for the same reason Ready gives.
	unknownCardConds := func(reason, msg string) {
		set(v1alpha1.ConditionSignatureVerified, metav1.ConditionUnknown, reason, msg)
		set(v1alpha1.ConditionBound, metav1.ConditionUnknown, reason, msg)
		set(v1alpha1.ConditionCardConsistent, metav1.ConditionUnknown, reason, msg)
		set(v1alpha1.ConditionVerified, metav1.ConditionFalse, reason, msg)
	}

	if selErr != nil {
		st.Phase = v1alpha1.PhaseError
		if selErr.reason == duck.ReasonTargetNotFound {
			// The workload may be created after its card; its creation re-queues the card.
			st.Phase = v1alpha1.PhasePending
			st.MarkReconciling(selErr.reason, selErr.message)
		} else {
			st.MarkStalled(selErr.reason, selErr.message)
		}
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
		e := v1alpha1.PodCard{PodName: sp.pod.Name, PodIP: sp.pod.Status.PodIP, URL: s.url, FetchStatus: s.fetchStatus, Error: cutEncoded(s.errMsg, maxEntryErrorBytes), CardHash: hashOf(s.card)}
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
		set(v1alpha1.ConditionSynced, metav1.ConditionFalse, v1alpha1.ReasonNoReadyPods, "no ready pod with an IP is selected")
	case len(failed) > 0:
		set(v1alpha1.ConditionSynced, metav1.ConditionFalse, failureReason(failed), podErrors(failed))
	default:
		set(v1alpha1.ConditionSynced, metav1.ConditionTrue, v1alpha1.ReasonFetched, fmt.Sprintf("fetched the card from %d pod(s)", len(pods)))
	}

	if len(withCard) == 0 {
		st.Phase = v1alpha1.PhasePending
		reason, msg := v1alpha1.ReasonNoReadyPods, "no ready pod with an IP is selected"
		if len(pods) > 0 {
			st.Phase = v1alpha1.PhaseError
			reason, msg = noCardReason(failed), podErrors(failed)
		}
		if reason == v1alpha1.ReasonNoReadyPods || reason == v1alpha1.ReasonNoValidCard {
			st.MarkReconciling(reason, msg)
		} else {
			st.MarkStalled(reason, msg)
		}
		unknownCardConds(reason, "no card fetched")
		return st
	}

	// The newest pod's card wins (a rollout's new version); ties go to the pod name.
	sort.SliceStable(withCard, func(i, j int) bool {
		return withCard[i].state.createdAt.After(withCard[j].state.createdAt)
	})
	chosen := withCard[0].state
	st.CardHash = chosen.card.hash
	switch {
	case chosen.card.status != nil:
		st.Card = &runtime.RawExtension{Raw: chosen.card.status}
	case old.CardHash == chosen.card.hash && old.Card != nil:
		// The bytes were not kept (over the store's budget) and the card did not change.
		st.Card = old.Card.DeepCopy()
	}
	v, b := chosen.verify, chosen.binding
	st.Signature = &v1alpha1.SignatureStatus{Verified: v.Verified, KeyID: v.KeyID, SpiffeID: v.SpiffeID, Algorithm: v.Algorithm, Reason: v.Reason, Message: cutEncoded(v.Message, maxMessageBytes)}
	st.Binding = &v1alpha1.BindingStatus{Bound: b.Bound, ExpectedSpiffeID: cutEncoded(b.Expected, maxSpiffeIDBytes), Reason: b.Reason, Message: cutEncoded(b.Message, maxMessageBytes)}
	set(v1alpha1.ConditionSignatureVerified, boolStatus(v.Verified), v.Reason, cutEncoded(v.Message, maxMessageBytes))
	set(v1alpha1.ConditionBound, boolStatus(b.Bound), b.Reason, cutEncoded(b.Message, maxMessageBytes))
	verified, reason, msg := verdict(v, b)
	set(v1alpha1.ConditionVerified, boolStatus(verified), reason, cutEncoded(msg, maxMessageBytes))

	var differ []string
	for _, sp := range withCard[1:] {
		if sp.state.card.hash != chosen.card.hash {
			differ = append(differ, sp.pod.Name)
		}
	}
	if len(differ) > 0 {
		sort.Strings(differ)
		set(v1alpha1.ConditionCardConsistent, metav1.ConditionFalse, v1alpha1.ReasonCardsDiffer,
			fmt.Sprintf("pods %s serve a different card than the newest pod %s, whose card is shown", strings.Join(differ, ", "), withCard[0].pod.Name))
	} else {
		set(v1alpha1.ConditionCardConsistent, metav1.ConditionTrue, v1alpha1.ReasonConsistent, fmt.Sprintf("%d pod(s) serve the same card", len(withCard)))
	}

	switch {
	case requireSig && !v.Verified:
		st.Phase = v1alpha1.PhaseError
		st.MarkStalled(v1alpha1.ReasonSignatureRequired, cutEncoded("a verified signature is required: "+v.Message, maxMessageBytes))
	case requireSig && !b.Bound:
		st.Phase = v1alpha1.PhaseError
		st.MarkStalled(v1alpha1.ReasonIdentityNotBound, cutEncoded("the signer must be the workload's identity: "+b.Message, maxMessageBytes))
	default:
		st.Phase = v1alpha1.PhaseActive
		msg := cutEncoded(fmt.Sprintf("card %q version %q available", chosen.card.name, chosen.card.version), maxMessageBytes)
		if !requireSig {
			msg += " (signature not required)"
		}
		st.MarkReady(v1alpha1.ReasonCardAvailable, msg)
	}
	return st
}

// verdict is the Verified condition of a card: True when the signature verifies and the signer is
// bound; otherwise the first cause, where a binding the spec cannot have (IdentityNotAllowed,
// InvalidSpiffeID, ...) comes before the signature's own failure.
func verdict(v signature.Result, b signature.BindingResult) (bool, string, string) {
	switch {
	case v.Verified && b.Bound:
		return true, v1alpha1.ReasonVerified, "signed by " + v.SpiffeID + ", the identity this card may claim"
	case b.Reason != signature.ReasonNotVerified && b.Reason != "":
		return false, b.Reason, b.Message
	default:
		return false, v.Reason, v.Message
	}
}

// failureReason is the condition reason of the first failed pod.
func failureReason(failed []servedPod) string {
	if r := failed[0].state.reason; r != "" {
		return r
	}
	return v1alpha1.ReasonFetchFailed
}

// noCardReason is Ready's reason when ready pods are selected and none has a valid card: the
// first failed pod's when every pod answered with a card that cannot be used (InvalidCard,
// CardTooLarge: Stalled until the agent serves another), NoValidCard when a pod could not be
// fetched (retried: Reconciling).
func noCardReason(failed []servedPod) string {
	for _, sp := range failed {
		if r := sp.state.reason; r != v1alpha1.ReasonInvalidCard && r != v1alpha1.ReasonCardTooLarge {
			return v1alpha1.ReasonNoValidCard
		}
	}
	return failureReason(failed)
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
		parts = append(parts, sp.pod.Name+": "+cutEncoded(sp.state.errMsg, 300))
	}
	return cutEncoded(strings.Join(parts, "; "), maxMessageBytes)
}

func boolStatus(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// cutEncoded returns s, valid UTF-8, cut so that its JSON encoding (as encoding/json writes it,
// escaping <, >, & and control characters as \u00XX) takes at most n bytes plus the ellipsis. Text
// from a pod ends up in status messages: its size must be bounded as the API server will count it.
func cutEncoded(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	size := 0
	for i, r := range s {
		size += encodedRuneLen(r)
		if size > n {
			return s[:i] + "…"
		}
	}
	return s
}

func encodedRuneLen(r rune) int {
	switch {
	case r == '<' || r == '>' || r == '&' || r < 0x20 || r == '\u2028' || r == '\u2029':
		return 6
	case r == '"' || r == '\\':
		return 2
	default:
		return utf8.RuneLen(r)
	}
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

// isVerified reads the verdict of a status: its Verified condition is True for its generation.
func isVerified(st v1alpha1.AgentCardStatus) bool {
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionVerified)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == st.ObservedGeneration
}

// failClosedStatus is the small status written when the API server refused desired: no card, no
// signature or binding result, every verdict-bearing condition saying why. It is small enough for
// any API server that accepts status writes at all.
func failClosedStatus(c *v1alpha1.AgentCard, desired v1alpha1.AgentCardStatus, writeErr error) v1alpha1.AgentCardStatus {
	st := v1alpha1.AgentCardStatus{
		Phase:          v1alpha1.PhaseError,
		DiscoveredPods: desired.DiscoveredPods,
		SyncErrors:     desired.SyncErrors,
	}
	st.Conditions = append([]metav1.Condition(nil), c.Status.Conditions...)
	st.Observe(c.Generation)
	msg := cutEncoded("the API server refused the AgentCard status ("+writeErr.Error()+"); the previous verdict is withdrawn until a status can be written", maxMessageBytes)
	set := func(t string, s metav1.ConditionStatus) { st.Set(t, s, v1alpha1.ReasonStatusWriteFailed, msg) }
	// The sync is retried with backoff: in progress, not stalled.
	st.MarkReconciling(v1alpha1.ReasonStatusWriteFailed, msg)
	set(v1alpha1.ConditionVerified, metav1.ConditionFalse)
	for _, t := range []string{v1alpha1.ConditionSynced, v1alpha1.ConditionSignatureVerified, v1alpha1.ConditionBound, v1alpha1.ConditionCardConsistent} {
		set(t, metav1.ConditionUnknown)
	}
	return st
}
