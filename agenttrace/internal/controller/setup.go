// Package controller wires the AgentTrace reconciler into a controller-runtime manager.
package controller

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// Name is the controller's name: field manager, event source and managed-by label value.
const Name = "kagenti-agenttrace"

// podConfigMapIndex indexes pods by the ConfigMaps a container of theirs mounts, so counting a
// workload's configured pods reads the pods that mount its trace ConfigMap, not every pod of the
// namespace (which made a namespace's reconciles quadratic in its pods).
const podConfigMapIndex = "agenttrace.podConfigMaps"

// Options are the pillar-specific settings taken from the command line.
type Options struct {
	// Namespaces are those watched (the manager's cache.Options.DefaultNamespaces, the
	// --namespaces flag); none: all. The pod informer (kit.SlimPods) runs beside the cache and
	// is told them here.
	Namespaces []string
	// MaxConcurrentReconciles bounds parallel reconciles.
	MaxConcurrentReconciles int
	// NotOwnedRetry is how soon a ConfigMap held by someone else is checked again.
	NotOwnedRetry time.Duration
}

// CacheOptions restricts what the manager caches to what this controller reads: only its own
// ConfigMaps, as metadata and a hash of their content (kit.DigestTransform), and the built-in
// workloads stripped to what templateWired and the pod selector need. Pods are not in it: they are
// kept as cachedPods in an informer of their own (kit.SlimPods, Setup). main and the tests use it.
func CacheOptions() cache.Options {
	o := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}:    {Label: labels.SelectorFromSet(labels.Set{contract.ManagedByLabel: Name}), Transform: kit.DigestTransform},
			&v1alpha1.AgentTrace{}: {Transform: kit.CompactObject},
		},
	}
	for w, by := range kit.TrimmedWorkloads(slimTemplate) {
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
	// Every lookup through the two indexes names a namespace: they are kept namespaced only
	// (kit.IndexFieldInNamespace), half the entries of the manager's field indexer.
	if err := kit.IndexTargetRefInNamespace(ctx, mgr.GetCache(), &v1alpha1.AgentTrace{}); err != nil {
		return err
	}
	pods, err := kit.NewSlimPods(mgr, opts.Namespaces, newCachedPod, map[string]kit.SlimPodIndexer[*cachedPod]{podConfigMapIndex: podConfigMaps})
	if err != nil {
		return err
	}
	events := mgr.GetEventRecorder(Name)
	r := &Reconciler{
		Client:   mgr.GetClient(),
		Resolver: duck.NewManagerResolver(mgr),
		Applier:  &kit.Applier{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), ManagedBy: Name},
		Status: &duck.StatusApplier{Client: mgr.GetClient(), FieldOwner: Name, Recorder: events, RequireCurrent: true,
			Conditions: []string{v1alpha1.ConditionTargetResolved, v1alpha1.ConditionConfigMapReady}},
		Recorder: events,
		Options:  opts,
		PodCache: pods,
	}
	newList := func() client.ObjectList { return &v1alpha1.AgentTraceList{} }
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named("agenttrace").
		For(&v1alpha1.AgentTrace{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A deleted or finished AgentTrace hands its target over to the next one in line.
		Watches(&v1alpha1.AgentTrace{}, duck.EnqueueSameTarget(mgr.GetClient(), newList),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&corev1.ConfigMap{}).
		WatchesRawSource(pods.Source(handler.TypedEnqueueRequestsFromMapFunc(r.podReferrers))).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
		Build(r)
	if err != nil {
		return err
	}
	r.Workloads = &kit.WorkloadWatches{Controller: c, Cache: mgr.GetCache(), Client: mgr.GetClient(),
		NewList: newList}
	return nil
}

// podConfigMaps returns the names of the ConfigMaps a container of the pod mounts (newCachedPod):
// a volume no container mounts configures nothing, and every index entry costs memory for each
// pod in the cluster.
func podConfigMaps(p *cachedPod) []string { return p.configMaps }

// podReferrers maps a pod to the AgentTrace whose ConfigMap it mounts: the controller owner of that
// ConfigMap in the cache, which holds only this controller's ConfigMaps. A ConfigMap not written
// yet needs no mapping: the reconcile that writes it counts the pods afterwards, and its arrival in
// the cache (Owns) runs that reconcile again.
func (r *Reconciler) podReferrers(ctx context.Context, pod *cachedPod) []reconcile.Request {
	var reqs []reconcile.Request
	for _, name := range podConfigMaps(pod) {
		var cm corev1.ConfigMap
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, &cm); err != nil {
			continue // not one of ours (or not yet in the cache)
		}
		if ref := metav1.GetControllerOf(&cm); ref != nil && ref.Kind == "AgentTrace" && strings.HasPrefix(ref.APIVersion, v1alpha1.GroupVersion.Group+"/") {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: pod.Namespace, Name: ref.Name}})
		}
	}
	return reqs
}
