package duck

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// testReferrer is a minimal custom resource holding a targetRef, as every pillar CR does.
type testReferrer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              testReferrerSpec `json:"spec"`
}

type testReferrerSpec struct {
	TargetRef *TargetRef `json:"targetRef,omitempty"`
}

func (r *testReferrer) GetTargetRef() *TargetRef { return r.Spec.TargetRef }

func (r *testReferrer) DeepCopyObject() runtime.Object {
	out := *r
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.TargetRef = r.Spec.TargetRef.DeepCopy()
	return &out
}

type testReferrerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []testReferrer `json:"items"`
}

func (l *testReferrerList) DeepCopyObject() runtime.Object {
	out := &testReferrerList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopyObject().(*testReferrer))
	}
	return out
}

var testReferrerGV = schema.GroupVersion{Group: "test.kagenti.io", Version: "v1"}

func addTestReferrer(s *runtime.Scheme) error {
	s.AddKnownTypeWithName(testReferrerGV.WithKind("TestReferrer"), &testReferrer{})
	s.AddKnownTypeWithName(testReferrerGV.WithKind("TestReferrerList"), &testReferrerList{})
	metav1.AddToGroupVersion(s, testReferrerGV)
	return nil
}
