// Package status builds an AgentCard's status from its pods' sync results, purely: the per-pod
// entries, the card shown, the conditions (Synced, SignatureVerified, Bound, Verified,
// CardConsistent, and Ready/Reconciling/Stalled), the text bounds of what a pod can make the
// controller write, the comparison that spares unchanged writes, and the fail-closed status
// written when the API server refuses one.
package status

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/verify"
	"github.com/kagenti/platform/pkg/duck"
)

// CardConditions are agentcard's own condition types besides Ready, Reconciling and Stalled (which
// the StatusApplier owns for every pillar); others (netpol's NetworkPolicyReady) are left alone.
var CardConditions = []string{
	v1alpha1.ConditionSynced, v1alpha1.ConditionSignatureVerified,
	v1alpha1.ConditionBound, v1alpha1.ConditionVerified, v1alpha1.ConditionCardConsistent,
}

// OwnConditions are every condition type this controller writes.
var OwnConditions = append([]string{duck.ConditionReady, duck.ConditionReconciling, duck.ConditionStalled}, CardConditions...)

// Bounds of the text written to status, in JSON-encoded bytes (what the API server receives).
const (
	MaxMessageBytes    = 1024
	MaxEntryErrorBytes = 512
	MaxKeyIDBytes      = 256
	MaxSpiffeIDBytes   = 2048
)

// PodResult is one ready pod and the result of its last sync.
type PodResult struct {
	// PodName and PodIP name the pod.
	PodName, PodIP string
	// URL is the card's address on the pod.
	URL string
	// Over is how the card was fetched (fetch.OverHTTP, OverHTTPS, OverMTLS); PeerID what the pod
	// proved over mutual TLS.
	Over, PeerID string
	// FetchStatus is v1alpha1.FetchSuccess, FetchFailed, FetchInvalid or FetchUnverified.
	FetchStatus string
	// Reason is the CamelCase cause of a failure; Error says what went wrong.
	Reason, Error string
	// Card is the pod's valid card, nil when it has none.
	Card *Card
	// Verify and Binding are the verification of Card.
	Verify  signature.Result
	Binding signature.BindingResult
	// ChangedAt is when the result last changed; CreatedAt when the pod was created.
	ChangedAt, CreatedAt time.Time
}

// Card is what the status needs of a pod's card.
type Card struct {
	Hash, Name, Version string
	// Status is the card as status.card carries it; nil when its bytes were not kept.
	Status []byte
}

func (c *Card) hash() string {
	if c == nil {
		return ""
	}
	return c.Hash
}

// SelectorError is a user-fixable problem with the pod selection, with Ready's reason.
type SelectorError struct {
	Reason, Message string
}

func (e *SelectorError) Error() string { return e.Message }

// Build computes the desired status from the sync results. It is pure: conditions keep
// their lastTransitionTime from old when their status does not change.
func Build(c *v1alpha1.AgentCard, pods []PodResult, selErr *SelectorError, requireSig bool, now time.Time) v1alpha1.AgentCardStatus {
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
		if selErr.Reason == duck.ReasonTargetNotFound {
			// The workload may be created after its card; its creation re-queues the card.
			st.Phase = v1alpha1.PhasePending
			st.MarkReconciling(selErr.Reason, selErr.Message)
		} else {
			st.MarkStalled(selErr.Reason, selErr.Message)
		}
		set(v1alpha1.ConditionSynced, metav1.ConditionFalse, selErr.Reason, selErr.Message)
		unknownCardConds(selErr.Reason, "no pods to fetch from")
		return st
	}

	oldEntries := map[string]v1alpha1.PodCard{}
	for _, e := range old.Cards {
		oldEntries[e.PodName] = e
	}
	var withCard, failed []PodResult
	for _, sp := range pods {
		s := sp
		e := v1alpha1.PodCard{PodName: sp.PodName, PodIP: sp.PodIP, URL: s.URL, FetchStatus: s.FetchStatus, Error: CutEncoded(s.Error, MaxEntryErrorBytes), CardHash: s.Card.hash(),
			FetchedOver: s.Over, PeerSpiffeID: CutEncoded(s.PeerID, MaxSpiffeIDBytes)}
		t := metav1.NewTime(s.ChangedAt.Truncate(time.Second))
		if prev, ok := oldEntries[e.PodName]; ok && prev.LastFetchTime != nil && samePodEntry(prev, e) {
			t = *prev.LastFetchTime
		}
		e.LastFetchTime = &t
		st.Cards = append(st.Cards, e)
		if s.Card != nil {
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
		return withCard[i].CreatedAt.After(withCard[j].CreatedAt)
	})
	chosen := withCard[0]
	st.CardHash = chosen.Card.Hash
	switch {
	case chosen.Card.Status != nil:
		st.Card = &runtime.RawExtension{Raw: chosen.Card.Status}
	case old.CardHash == chosen.Card.Hash && old.Card != nil:
		// The bytes were not kept (over the store's budget) and the card did not change.
		st.Card = old.Card.DeepCopy()
	}
	v, b := chosen.Verify, chosen.Binding
	st.Signature = &v1alpha1.SignatureStatus{Verified: v.Verified, KeyID: v.KeyID, SpiffeID: v.SpiffeID, Algorithm: v.Algorithm, Reason: v.Reason, Message: CutEncoded(v.Message, MaxMessageBytes)}
	st.Binding = &v1alpha1.BindingStatus{Bound: b.Bound, ExpectedSpiffeID: CutEncoded(b.Expected, MaxSpiffeIDBytes), Reason: b.Reason, Message: CutEncoded(b.Message, MaxMessageBytes)}
	set(v1alpha1.ConditionSignatureVerified, boolStatus(v.Verified), v.Reason, CutEncoded(v.Message, MaxMessageBytes))
	set(v1alpha1.ConditionBound, boolStatus(b.Bound), b.Reason, CutEncoded(b.Message, MaxMessageBytes))
	verdict := verify.Verdict{Signature: v, Binding: b}
	reason, msg := verdict.Cause()
	set(v1alpha1.ConditionVerified, boolStatus(verdict.Verified()), reason, CutEncoded(msg, MaxMessageBytes))

	var differ []string
	for _, sp := range withCard[1:] {
		if sp.Card.Hash != chosen.Card.Hash {
			differ = append(differ, sp.PodName)
		}
	}
	if len(differ) > 0 {
		sort.Strings(differ)
		set(v1alpha1.ConditionCardConsistent, metav1.ConditionFalse, v1alpha1.ReasonCardsDiffer,
			fmt.Sprintf("pods %s serve a different card than the newest pod %s, whose card is shown", strings.Join(differ, ", "), withCard[0].PodName))
	} else {
		set(v1alpha1.ConditionCardConsistent, metav1.ConditionTrue, v1alpha1.ReasonConsistent, fmt.Sprintf("%d pod(s) serve the same card", len(withCard)))
	}

	switch {
	case requireSig && !v.Verified:
		st.Phase = v1alpha1.PhaseError
		st.MarkStalled(v1alpha1.ReasonSignatureRequired, CutEncoded("a verified signature is required: "+v.Message, MaxMessageBytes))
	case requireSig && !b.Bound:
		st.Phase = v1alpha1.PhaseError
		st.MarkStalled(v1alpha1.ReasonIdentityNotBound, CutEncoded("the signer must be the workload's identity: "+b.Message, MaxMessageBytes))
	default:
		st.Phase = v1alpha1.PhaseActive
		msg := CutEncoded(fmt.Sprintf("card %q version %q available", chosen.Card.Name, chosen.Card.Version), MaxMessageBytes)
		if !requireSig {
			msg += " (signature not required)"
		}
		st.MarkReady(v1alpha1.ReasonCardAvailable, msg)
	}
	return st
}

// failureReason is the condition reason of the first failed pod.
func failureReason(failed []PodResult) string {
	if r := failed[0].Reason; r != "" {
		return r
	}
	return v1alpha1.ReasonFetchFailed
}

// noCardReason is Ready's reason when ready pods are selected and none has a valid card: the
// first failed pod's when every pod answered with a card that cannot be used (InvalidCard,
// CardTooLarge: Stalled until the agent serves another), NoValidCard when a pod could not be
// fetched (retried: Reconciling).
func noCardReason(failed []PodResult) string {
	for _, sp := range failed {
		if r := sp.Reason; r != v1alpha1.ReasonInvalidCard && r != v1alpha1.ReasonCardTooLarge {
			return v1alpha1.ReasonNoValidCard
		}
	}
	return failureReason(failed)
}

func samePodEntry(a, b v1alpha1.PodCard) bool {
	a.LastFetchTime, b.LastFetchTime = nil, nil
	return a == b
}

func podErrors(failed []PodResult) string {
	parts := make([]string, 0, len(failed))
	for i, sp := range failed {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(failed)-3))
			break
		}
		parts = append(parts, sp.PodName+": "+CutEncoded(sp.Error, 300))
	}
	return CutEncoded(strings.Join(parts, "; "), MaxMessageBytes)
}

func boolStatus(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// CutEncoded returns s, valid UTF-8, cut so that its JSON encoding (as encoding/json writes it,
// escaping <, >, & and control characters as \u00XX) takes at most n bytes plus the ellipsis. Text
// from a pod ends up in status messages: its size must be bounded as the API server will count it.
func CutEncoded(s string, n int) string {
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

// Equal compares two statuses the way the API server would store them, ignoring timestamps
// that only move when something else changed, the card body (its hash is compared) and other
// controllers' conditions.
func Equal(a, b v1alpha1.AgentCardStatus) bool {
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
	for _, t := range OwnConditions {
		if c := meta.FindStatusCondition(s.Conditions, t); c != nil {
			cc := *c
			cc.LastTransitionTime = metav1.Time{}
			conds = append(conds, cc)
		}
	}
	s.Conditions = conds
	return s
}

// IsVerified reads the verdict of a status: its Verified condition is True for its generation.
func IsVerified(st v1alpha1.AgentCardStatus) bool {
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionVerified)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == st.ObservedGeneration
}

// FailClosed is the small status written when the API server refused desired: no card, no
// signature or binding result, every verdict-bearing condition saying why. It is small enough for
// any API server that accepts status writes at all.
func FailClosed(c *v1alpha1.AgentCard, desired v1alpha1.AgentCardStatus, writeErr error) v1alpha1.AgentCardStatus {
	st := v1alpha1.AgentCardStatus{
		Phase:          v1alpha1.PhaseError,
		DiscoveredPods: desired.DiscoveredPods,
		SyncErrors:     desired.SyncErrors,
	}
	st.Conditions = append([]metav1.Condition(nil), c.Status.Conditions...)
	st.Observe(c.Generation)
	msg := CutEncoded("the API server refused the AgentCard status ("+writeErr.Error()+"); the previous verdict is withdrawn until a status can be written", MaxMessageBytes)
	set := func(t string, s metav1.ConditionStatus) { st.Set(t, s, v1alpha1.ReasonStatusWriteFailed, msg) }
	// The sync is retried with backoff: in progress, not stalled.
	st.MarkReconciling(v1alpha1.ReasonStatusWriteFailed, msg)
	set(v1alpha1.ConditionVerified, metav1.ConditionFalse)
	for _, t := range []string{v1alpha1.ConditionSynced, v1alpha1.ConditionSignatureVerified, v1alpha1.ConditionBound, v1alpha1.ConditionCardConsistent} {
		set(t, metav1.ConditionUnknown)
	}
	return st
}
