package podlabels

import (
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/podcache"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/verify"
)

// Label is what a pod's last sync calls for on its kagenti.io/signature-verified label.
type Label int

const (
	// LabelKept: the pod has no card (not fetched yet, a failed fetch, an invalid card), so no
	// verification was made: its label stays as the last verification left it, except true,
	// which is revoked.
	LabelKept Label = iota
	// LabelAbsent: the card has no signature and the AgentCard does not require one: nothing to
	// verify, no label.
	LabelAbsent
	// LabelFalse: the verification failed (a signature that does not verify, a signer not bound
	// to the pod's identity, no trust bundle, an unsigned card that must be signed).
	LabelFalse
	// LabelTrue: the card's signature verified and its signer is the pod's identity.
	LabelTrue
)

// Want is what a pod's label should say after a sync: hasCard says whether the pod served a
// valid card (whose verification is v), requireSig is the AgentCard's (spec.requireSignature or
// the controller's default).
func Want(hasCard bool, v verify.Verdict, requireSig bool) Label {
	switch {
	case !hasCard:
		return LabelKept
	case v.Verified():
		return LabelTrue
	case v.Signature.Reason == signature.ReasonNoSignature && !requireSig:
		return LabelAbsent
	default:
		return LabelFalse
	}
}

// value is the label value l sets ("" for none); false for LabelKept, which sets nothing.
func (l Label) value() (string, bool) {
	switch l {
	case LabelAbsent:
		return "", true
	case LabelFalse:
		return "false", true
	case LabelTrue:
		return "true", true
	default:
		return "", false
	}
}

// revokedValue is what replaces true on a pod whose verdict l is not positive: none when its card
// has nothing to verify, false otherwise (a failed verification, or no card to verify at all).
func (l Label) revokedValue() string {
	if l == LabelAbsent {
		return ""
	}
	return "false"
}

// LabelledVerified passes pods that carry kagenti.io/signature-verified=true (the LabelGuard
// judges them).
func LabelledVerified() predicate.TypedPredicate[*podcache.Pod] {
	return predicate.NewTypedPredicateFuncs(func(p *podcache.Pod) bool {
		return p.Labels[v1alpha1.LabelSignatureVerified] == "true"
	})
}

// SameExceptOurs says whether two label sets are equal but for kagenti.io/signature-verified
// (so that labelling a pod does not trigger a sync of its AgentCards).
func SameExceptOurs(a, b map[string]string) bool {
	count := func(m map[string]string) int {
		n := len(m)
		if _, ok := m[v1alpha1.LabelSignatureVerified]; ok {
			n--
		}
		return n
	}
	if count(a) != count(b) {
		return false
	}
	for k, v := range a {
		if k != v1alpha1.LabelSignatureVerified && b[k] != v {
			return false
		}
	}
	return true
}
