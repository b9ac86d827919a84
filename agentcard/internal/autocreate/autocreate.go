// Package autocreate is AgentCardSync: one AgentCard for every workload labelled
// kagenti.io/type=agent, created when the workload asks for one and no user's AgentCard targets
// it, deleted (only when it is ours) when it no longer does.
package autocreate

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/resources"
	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
)

// +kubebuilder:rbac:groups=kagenti.io,resources=agentcards,verbs=create;delete

// Kinds are the workload kinds whose kagenti.io/type=agent objects get an AgentCard.
var Kinds = []schema.GroupVersionKind{
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "apps", Version: "v1", Kind: "StatefulSet"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"},
	{Group: "batch", Version: "v1", Kind: "Job"},
	{Group: "batch", Version: "v1", Kind: "CronJob"},
}

// SyncReconciler (AgentCardSync) keeps one auto-created AgentCard per agent workload of one kind.
// It only creates and deletes: once created, the AgentCard belongs to the user as much as to us,
// and edits to it are never reverted.
type SyncReconciler struct {
	Client   client.Client
	GVK      schema.GroupVersionKind
	Recorder events.EventRecorder
}

// wantsCard says whether a workload asks for an auto-created card, and why not otherwise.
func wantsCard(w *unstructured.Unstructured) (bool, string) {
	if !w.GetDeletionTimestamp().IsZero() {
		return false, "workload is being deleted"
	}
	if w.GetLabels()[v1alpha1.LabelType] != "agent" {
		return false, "workload is not labelled " + v1alpha1.LabelType + "=agent"
	}
	if strings.EqualFold(w.GetAnnotations()[v1alpha1.AnnotationDiscovery], "disabled") {
		return false, "annotation " + v1alpha1.AnnotationDiscovery + "=disabled"
	}
	return true, ""
}

// Reconcile implements reconcile.Reconciler for workloads of r.GVK.
func (r *SyncReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// Read typed from the cache (the informer the watches of this kind share, trimmed by
	// kit.TrimmedWorkloads), then viewed as unstructured like any workload.
	obj := duck.NewBuiltinObject(r.GVK)
	name := configmap.AgentCardName(req.Name, r.GVK.Kind)
	key := types.NamespacedName{Namespace: req.Namespace, Name: name}
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			// The garbage collector deletes our card through its owner reference.
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	workload, err := duck.NewWorkloadFromObject(obj, r.GVK)
	if err != nil {
		return ctrl.Result{}, err
	}
	w := workload.Object()
	want, why := wantsCard(w)
	if want {
		if other, err := r.userCardFor(ctx, w, name); err != nil {
			return ctrl.Result{}, err
		} else if other != "" {
			want, why = false, fmt.Sprintf("AgentCard %q made by a user already targets it", other)
		}
	}

	var existing v1alpha1.AgentCard
	err = r.Client.Get(ctx, key, &existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	exists := err == nil
	switch {
	case want && !exists:
		card := resources.AgentCardFor(w)
		if err := r.Client.Create(ctx, card); err != nil && !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, err
		}
		log.FromContext(ctx).Info("created AgentCard", "agentcard", name)
	case !want && exists && r.ownedBy(&existing, w):
		if err := r.Client.Delete(ctx, &existing, client.Preconditions{UID: &existing.UID}); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
		log.FromContext(ctx).Info("deleted auto-created AgentCard", "agentcard", name, "why", why)
		if r.Recorder != nil {
			r.Recorder.Eventf(w, nil, "Normal", "AgentCardRemoved", "Delete", "deleted auto-created AgentCard %s: %s", name, why)
		}
	}
	return ctrl.Result{}, nil
}

// ownedBy: only cards we created for this workload are ever deleted.
func (r *SyncReconciler) ownedBy(c *v1alpha1.AgentCard, w *unstructured.Unstructured) bool {
	if c.Labels[contract.ManagedByLabel] != resources.ManagedBy {
		return false
	}
	ref := metav1.GetControllerOf(c)
	return ref != nil && ref.UID == w.GetUID()
}

// userCardFor returns the name of an AgentCard other than ours that targets the workload.
func (r *SyncReconciler) userCardFor(ctx context.Context, w *unstructured.Unstructured, ours string) (string, error) {
	var list v1alpha1.AgentCardList
	if err := r.Client.List(ctx, &list, client.InNamespace(w.GetNamespace()),
		client.MatchingFields{duck.TargetRefIndex: duck.TargetKey(r.GVK.GroupKind(), w.GetName())}); err != nil {
		return "", err
	}
	for _, c := range list.Items {
		if c.Name != ours && c.Labels[contract.ManagedByLabel] != resources.ManagedBy {
			return c.Name, nil
		}
	}
	return "", nil
}
