package duck

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// gadget is a custom resource whose status is the shared model plus a pillar field, as every
// pillar's is (testdata/crds/gadgets.yaml).
type gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              gadgetSpec   `json:"spec"`
	Status            gadgetStatus `json:"status,omitempty"`
}

type gadgetSpec struct {
	Size int `json:"size,omitempty"`
}

type gadgetStatus struct {
	Status `json:",inline"`
	Phase  string `json:"phase,omitempty"`
}

func (g *gadget) GetStatus() *Status { return &g.Status.Status }

func (g *gadget) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	g.Status.Status.DeepCopyInto(&out.Status.Status)
	return &out
}

func addGadget(s *runtime.Scheme) error {
	s.AddKnownTypeWithName(testReferrerGV.WithKind("Gadget"), &gadget{})
	metav1.AddToGroupVersion(s, testReferrerGV)
	return nil
}
