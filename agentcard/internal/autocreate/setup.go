package autocreate

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/pkg/duck"
)

// Setup registers one AgentCardSync controller per kind of Kinds with mgr; its Events are
// recorded as fieldManager.
func Setup(mgr ctrl.Manager, fieldManager string) error {
	for _, gvk := range Kinds {
		sr := &SyncReconciler{Client: mgr.GetClient(), GVK: gvk, Recorder: mgr.GetEventRecorder(fieldManager)}
		err := ctrl.NewControllerManagedBy(mgr).
			Named("agentcardsync-"+strings.ToLower(gvk.Kind)).
			For(duck.NewBuiltinObject(gvk), builder.WithPredicates(predicate.Or(predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
			// A user's AgentCard appearing or disappearing for a workload re-evaluates the workload.
			Watches(&v1alpha1.AgentCard{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				c := o.(*v1alpha1.AgentCard)
				ref := c.Spec.TargetRef
				if ref == nil {
					return nil
				}
				g, err := ref.GroupVersionKind()
				if err != nil || g.GroupKind() != gvk.GroupKind() {
					return nil
				}
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: ref.Name}}}
			}), builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
			Complete(sr)
		if err != nil {
			return err
		}
	}
	return nil
}
