// Package resources makes the objects agentcard creates, purely: the AgentCard auto-created for
// an agent workload.
package resources

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
)

// ManagedBy is the app.kubernetes.io/managed-by value of AgentCards agentcard creates.
const ManagedBy = "kagenti-agentcard"

// AgentCardFor is the AgentCard auto-created for an agent workload: named after it (see
// configmap.AgentCardName), targeting it, and controlled by it so that it goes with the workload.
func AgentCardFor(w *unstructured.Unstructured) *v1alpha1.AgentCard {
	gvk := w.GroupVersionKind()
	yes := true
	return &v1alpha1.AgentCard{
		ObjectMeta: metav1.ObjectMeta{
			Name:      configmap.AgentCardName(w.GetName(), gvk.Kind),
			Namespace: w.GetNamespace(),
			Labels:    map[string]string{contract.ManagedByLabel: ManagedBy},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: w.GetName(), UID: w.GetUID(),
				Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: v1alpha1.AgentCardSpec{
			TargetRef: &duck.TargetRef{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: w.GetName()},
		},
	}
}
