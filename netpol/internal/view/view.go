// Package view is netpol's duck view of an AgentCard: just the fields this controller reads, parsed
// from an unstructured object. netpol never imports the agentcard module (ARCHITECTURE.md §2); the
// AgentCard CRD's schema is the source of truth, this package only follows it.
package view

import (
	"encoding/json"
	"fmt"

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
	// BindingRequired is true when spec.identityBinding is set: the card is verified only if bound.
	BindingRequired bool

	// Signature is status.signature; nil while agentcard has not reported it.
	Signature *Signature
	// Binding is status.binding; nil while agentcard has not reported it.
	Binding *Binding

	// Conditions are status.conditions (netpol reads its own to keep lastTransitionTime stable).
	Conditions []metav1.Condition
}

// Signature is status.signature.
type Signature struct {
	Verified bool   `json:"verified"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Binding is status.binding.
type Binding struct {
	Bound   bool   `json:"bound"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
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
	if v, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "identityBinding"); found && v != nil {
		c.BindingRequired = true
	}
	if err := nested(u, &c.Signature, "status", "signature"); err != nil {
		return nil, err
	}
	if err := nested(u, &c.Binding, "status", "binding"); err != nil {
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
		return fmt.Errorf("%s: %w", fieldPath(path), err)
	}
	if !found || v == nil {
		return nil
	}
	raw, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(raw, out)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", fieldPath(path), err)
	}
	return nil
}

func fieldPath(path []string) string {
	s := ""
	for i, p := range path {
		if i > 0 {
			s += "."
		}
		s += p
	}
	return s
}

// Verification is the verdict netpol acts on.
type Verification struct {
	// Verified is true when the signature is verified and, if spec.identityBinding is set, the
	// binding is bound. "Not yet known" is not verified.
	Verified bool
	// Reason explains the verdict in a few words for condition messages and events.
	Reason string
}

// Verify computes the verdict (seed: "both signature AND binding must pass").
func (c *AgentCard) Verify() Verification {
	switch {
	case c.Signature == nil:
		return Verification{Reason: "signature verification not reported yet"}
	case !c.Signature.Verified:
		return Verification{Reason: withDetail("signature not verified", c.Signature.Reason, c.Signature.Message)}
	case !c.BindingRequired:
		return Verification{Verified: true, Reason: "signature verified"}
	case c.Binding == nil:
		return Verification{Reason: "signature verified, identity binding not reported yet"}
	case !c.Binding.Bound:
		return Verification{Reason: withDetail("signature verified, identity binding not bound", c.Binding.Reason, c.Binding.Message)}
	}
	return Verification{Verified: true, Reason: "signature verified and identity bound"}
}

func withDetail(s, reason, message string) string {
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
