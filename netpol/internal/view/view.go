// Package view is netpol's duck view of an AgentCard: just the fields this controller reads, parsed
// from an unstructured object. netpol never imports the agentcard module (docs/architecture.md §2); the
// AgentCard CRD's schema is the source of truth, this package only follows it.
package view

import (
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kagenti/platform/pkg/duck"
)

var (
	// GroupVersion of the AgentCard API.
	GroupVersion = schema.GroupVersion{Group: "kagenti.io", Version: "v1alpha1"}
	// AgentCardGVK is the kind netpol reads.
	AgentCardGVK = GroupVersion.WithKind("AgentCard")
	// AgentCardListGVK is its list kind.
	AgentCardListGVK = GroupVersion.WithKind("AgentCardList")
)

// NewAgentCard returns an empty unstructured AgentCard (for Get, watches and indexes).
func NewAgentCard() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(AgentCardGVK)
	return u
}

// NewAgentCardList returns an empty unstructured AgentCard list.
func NewAgentCardList() *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(AgentCardListGVK)
	return l
}

// ConditionVerified is the condition in which agentcard publishes its verdict on an AgentCard
// (agentcard's api/v1alpha1.ConditionVerified): True when the card's signature verifies and its
// signer is the identity the card may claim. netpol follows it and computes nothing itself, so the
// two pillars cannot disagree on what "verified" means.
const ConditionVerified = "Verified"

// AgentCard is the part of an AgentCard netpol acts on.
type AgentCard struct {
	Name       string
	Namespace  string
	UID        types.UID
	Generation int64

	// TargetRef (spec.targetRef) names the workload whose pods the card describes; nil in selector mode.
	TargetRef *duck.TargetRef
	// Selector (spec.selector) selects the pods directly; nil in targetRef mode.
	Selector *metav1.LabelSelector

	// Conditions are status.conditions: agentcard's Verified is the verdict, and netpol reads its
	// own to keep lastTransitionTime stable.
	Conditions []metav1.Condition
}

// FromUnstructured parses the view out of u. Malformed fields are errors naming the field, so
// the controller can report them instead of guessing.
func FromUnstructured(u *unstructured.Unstructured) (*AgentCard, error) {
	c := &AgentCard{Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(), Generation: u.GetGeneration()}
	if err := nested(u, &c.TargetRef, "spec", "targetRef"); err != nil {
		return nil, err
	}
	if err := nested(u, &c.Selector, "spec", "selector"); err != nil {
		return nil, err
	}
	if err := nested(u, &c.Conditions, "status", "conditions"); err != nil {
		return nil, err
	}
	return c, nil
}

// nested decodes the field at path into out (a pointer to a pointer or slice); absent or null
// fields leave out untouched.
func nested(u *unstructured.Unstructured, out any, path ...string) error {
	v, found, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(path, "."), err)
	}
	if !found || v == nil {
		return nil
	}
	raw, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(raw, out)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(path, "."), err)
	}
	return nil
}

// Verification is the verdict netpol acts on.
type Verification struct {
	// Verified is true when agentcard's Verified condition is True for the AgentCard's current
	// generation. No condition, or one about an older generation (the spec changed since), is
	// not verified: netpol fails closed until agentcard has judged the card as it is.
	Verified bool
	// Reason explains the verdict in a few words for condition messages and events.
	Reason string
}

// maxDetail bounds agentcard's message as repeated in netpol's condition and policy annotation.
const maxDetail = 256

// Verify reads agentcard's verdict.
func (c *AgentCard) Verify() Verification {
	v := c.Condition(ConditionVerified)
	switch {
	case v == nil:
		return Verification{Reason: "agentcard has not reported a verdict yet"}
	case v.ObservedGeneration != c.Generation:
		return Verification{Reason: fmt.Sprintf("agentcard's verdict is about generation %d, the AgentCard is at generation %d; not verified until it judges the current spec",
			v.ObservedGeneration, c.Generation)}
	case v.Status != metav1.ConditionTrue:
		return Verification{Reason: withDetail("not verified", v.Reason, v.Message)}
	}
	return Verification{Verified: true, Reason: withDetail("verified", "", v.Message)}
}

func withDetail(s, reason, message string) string {
	if len(message) > maxDetail {
		message = strings.ToValidUTF8(message[:maxDetail], "") + "…"
	}
	detail := reason
	if message != "" {
		if detail != "" {
			detail += ": "
		}
		detail += message
	}
	if detail == "" {
		return s
	}
	return s + " (" + detail + ")"
}

// Condition returns the status condition of the given type, or nil.
func (c *AgentCard) Condition(condType string) *metav1.Condition {
	for i := range c.Conditions {
		if c.Conditions[i].Type == condType {
			return &c.Conditions[i]
		}
	}
	return nil
}
