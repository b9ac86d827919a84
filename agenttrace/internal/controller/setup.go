// Package controller wires the AgentTrace reconciler into a controller-runtime manager.
package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/duck"
)

// Name is the controller's name: field manager, event source and managed-by label value.
const Name = "kagenti-agenttrace"

// configMapIndex indexes AgentTraces by the trace ConfigMap their target implies, so a pod event
// maps to its AgentTrace through the volumes it mounts, with no owner-chain lookups.
const configMapIndex = "agenttrace.configMapName"

// podConfigMapIndex indexes pods by the ConfigMaps their volumes name, so counting a workload's
// configured pods reads the pods that mount its trace ConfigMap, not every pod of the namespace
// (which made a namespace's reconciles quadratic in its pods).
const podConfigMapIndex = "agenttrace.podConfigMaps"

// Options are the pillar-specific settings taken from the command line.
type Options struct {
	// MaxConcurrentReconciles bounds parallel reconciles.
	MaxConcurrentReconciles int
	// NotOwnedRetry is how soon a ConfigMap held by someone else is checked again.
	NotOwnedRetry time.Duration
}

// CacheOptions restricts what the manager caches to what this controller reads: only its own
// ConfigMaps, as metadata and a hash of their content (configmap.DigestTransform), pods stripped to
// the fields configuredPods needs, and the built-in workloads stripped to what templateWired and
// the pod selector need. main and the tests use it.
func CacheOptions() cache.Options {
	o := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{configmap.ManagedByLabel: Name}), Transform: configmap.DigestTransform},
			&corev1.Pod{}:       {Transform: stripPod},
		},
	}
	for w, by := range duck.TrimmedWorkloads(slimTemplate) {
		o.ByObject[w] = by
	}
	return o
}

// ClientOptions make unstructured reads (the workloads, through duck.Resolver) come from the cache.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{Unstructured: true}}
}

// Setup registers the reconciler, its indexes and watches with mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	ctx := context.Background()
	if opts.MaxConcurrentReconciles == 0 {
		opts.MaxConcurrentReconciles = 4
	}
	if opts.NotOwnedRetry == 0 {
		opts.NotOwnedRetry = 10 * time.Second
	}
	if err := duck.IndexTargetRef(ctx, mgr.GetFieldIndexer(), &v1alpha1.AgentTrace{}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.AgentTrace{}, configMapIndex, func(o client.Object) []string {
		return []string{configmap.TraceName(o.(*v1alpha1.AgentTrace).Spec.TargetRef.Name)}
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, podConfigMapIndex, podConfigMaps); err != nil {
		return err
	}
	events := mgr.GetEventRecorder(Name)
	r := &Reconciler{
		Client:   mgr.GetClient(),
		Resolver: duck.NewManagerResolver(mgr),
		Applier:  &configmap.Applier{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), ManagedBy: Name},
		Status: &duck.StatusApplier{Client: mgr.GetClient(), FieldOwner: Name, Recorder: events, RequireCurrent: true,
			Conditions: []string{v1alpha1.ConditionTargetResolved, v1alpha1.ConditionConfigMapReady}},
		Recorder: events,
		Options:  opts,
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("agenttrace").
		For(&v1alpha1.AgentTrace{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A deleted or finished AgentTrace hands its target over to the next one in line.
		Watches(&v1alpha1.AgentTrace{}, handler.EnqueueRequestsFromMapFunc(r.sameTarget),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&corev1.ConfigMap{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.podReferrers)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles})
	for _, gvk := range duck.BuiltinKinds() {
		// Typed, as the resolver reads them (duck.NewManagerResolver): one informer per kind.
		b = b.Watches(duck.NewBuiltinObject(gvk), duck.EnqueueReferrers(mgr.GetClient(), gvk.GroupKind(),
			func() client.ObjectList { return &v1alpha1.AgentTraceList{} }))
	}
	return b.Complete(r)
}

// podConfigMaps returns the names of the ConfigMaps a pod's volumes are backed by.
func podConfigMaps(o client.Object) []string {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return nil
	}
	var names []string
	for _, v := range p.Spec.Volumes {
		if v.ConfigMap != nil {
			names = append(names, v.ConfigMap.Name)
		}
	}
	return names
}

// sameTarget enqueues the other AgentTraces of an AgentTrace's target, so a conflict resolves as
// soon as the winner goes away or moves to another target.
func (r *Reconciler) sameTarget(ctx context.Context, o client.Object) []reconcile.Request {
	at, ok := o.(*v1alpha1.AgentTrace)
	if !ok {
		return nil
	}
	gvk, err := at.Spec.TargetRef.GroupVersionKind()
	if err != nil {
		return nil
	}
	var list v1alpha1.AgentTraceList
	if err := r.Client.List(ctx, &list, client.InNamespace(at.Namespace),
		client.MatchingFields{duck.TargetRefIndex: duck.TargetKey(gvk.GroupKind(), at.Spec.TargetRef.Name)}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if list.Items[i].Name != at.Name {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// podReferrers maps a pod to the AgentTraces whose ConfigMap it mounts.
func (r *Reconciler) podReferrers(ctx context.Context, o client.Object) []reconcile.Request {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return nil
	}
	var reqs []reconcile.Request
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		var list v1alpha1.AgentTraceList
		if err := r.Client.List(ctx, &list, client.InNamespace(pod.Namespace),
			client.MatchingFields{configMapIndex: v.ConfigMap.Name}); err != nil {
			continue
		}
		for i := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}
