package view

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kagenti/platform/pkg/duck"
)

// CardStatus is an AgentCard as netpol reports on it: its metadata and its status conditions, the
// duck.Object that duck.StatusApplier writes. netpol's applier owns only NetworkPolicyReady in it
// (ConditionsOnly); agentcard's conditions are read so that they compare equal and stay agentcard's.
type CardStatus struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            duck.Status `json:"status,omitempty"`
}

var _ duck.Object = &CardStatus{}

// GetStatus implements duck.Object.
func (c *CardStatus) GetStatus() *duck.Status { return &c.Status }

// DeepCopyObject implements runtime.Object.
func (c *CardStatus) DeepCopyObject() runtime.Object {
	out := &CardStatus{TypeMeta: c.TypeMeta}
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	c.Status.DeepCopyInto(&out.Status)
	return out
}

// AddToScheme registers CardStatus as the AgentCard kind, for the StatusApplier's scheme lookups.
// netpol reads AgentCards unstructured (a typed read would need the whole schema); this type only
// carries what it writes.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypeWithName(AgentCardGVK, &CardStatus{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// StatusOf is u's metadata and the duck.Status part of its status (observedGeneration and
// conditions). A status that does not parse (the CRD's schema makes that impossible on a real API
// server) reads as empty: netpol then writes its own condition, which it can always do.
func StatusOf(u *unstructured.Unstructured) *CardStatus {
	c := &CardStatus{ObjectMeta: metav1.ObjectMeta{
		Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(),
		Generation: u.GetGeneration(), ResourceVersion: u.GetResourceVersion(),
	}}
	c.SetGroupVersionKind(AgentCardGVK)
	if raw, found, _ := unstructured.NestedFieldNoCopy(u.Object, "status"); found {
		b, err := json.Marshal(raw)
		if err == nil {
			err = json.Unmarshal(b, &c.Status)
		}
		if err != nil {
			c.Status = duck.Status{}
		}
	}
	return c
}
