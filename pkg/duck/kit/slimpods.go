package kit

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// SlimPods is an informer of every pod in the cluster that keeps each one as T, a small type of the
// controller's own holding only what it reads (built by the slim function given to NewSlimPods),
// instead of a corev1.Pod. A corev1.Pod costs ≈ 2.4 KB in the cache even with everything but a few
// fields dropped, because its spec and status structs are large when empty; a controller's own
// type of a pod costs what its fields cost.
//
// The informer runs beside the manager's cache, not in it (the manager's cache holds only the
// types its scheme maps to a kind): Source feeds its events to a controller, List reads it through
// a namespaced index. Nothing else may read pods through the manager's client or cache, or that
// starts a second, whole-pod informer.
//
// T is a client.Object so that controller-runtime's event handling treats deletions as it does for
// its own informers (a tombstone is told from an object by that interface); the slim function
// fills only the metadata the controller reads. Objects in the store are shared: never change one.
type SlimPods[T client.Object] struct {
	// informers holds one informer per watched namespace, or one under "" for all namespaces.
	informers map[string]toolscache.SharedIndexInformer
}

// SlimPodIndexer returns the values a pod is indexed under; SlimPods keeps each under the pod's
// namespace (as IndexFieldInNamespace does), so List must name one.
type SlimPodIndexer[T client.Object] func(T) []string

// NewSlimPods creates the informer and adds it to mgr, which runs it (in every replica, leader or
// not, like its cache) before starting the controllers. namespaces are those to watch, as the
// manager's cache.Options.DefaultNamespaces (a controller may be granted pods in those only);
// none watches all. slim turns each pod from the API server into T; indexes are the named indexes
// List looks up.
func NewSlimPods[T client.Object](mgr manager.Manager, namespaces []string, slim func(*corev1.Pod) T, indexes map[string]SlimPodIndexer[T]) (*SlimPods[T], error) {
	cs, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("pods informer: %w", err)
	}
	p := NewSlimPodsFor(cs, namespaces, slim, indexes)
	if err := mgr.Add(p); err != nil {
		return nil, fmt.Errorf("pods informer: %w", err)
	}
	return p, nil
}

// NewSlimPodsFor creates the informer over cs without adding it to a manager: the caller starts it
// (Start) and waits for it (WaitForSync). NewSlimPods is this for a manager's client.
func NewSlimPodsFor[T client.Object](cs kubernetes.Interface, namespaces []string, slim func(*corev1.Pod) T, indexes map[string]SlimPodIndexer[T]) *SlimPods[T] {
	if len(namespaces) == 0 {
		namespaces = []string{corev1.NamespaceAll}
	}
	pods := cs.CoreV1()
	p := &SlimPods[T]{informers: map[string]toolscache.SharedIndexInformer{}}
	for _, ns := range namespaces {
		lw := &toolscache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return pods.Pods(ns).List(ctx, o)
			},
			WatchFuncWithContext: pods.Pods(ns).Watch,
		}
		// A client that cannot stream a list (client-go's fake clientset) is listed the old way.
		p.informers[ns] = newSlimPodInformer(toolscache.ToListWatcherWithWatchListSemantics(lw, cs), slim, indexes)
	}
	return p
}

func newSlimPodInformer[T client.Object](lw toolscache.ListerWatcher, slim func(*corev1.Pod) T, indexes map[string]SlimPodIndexer[T]) toolscache.SharedIndexInformer {
	indexers := toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}
	for name, values := range indexes {
		indexers[name] = func(obj any) ([]string, error) {
			o, ok := obj.(T)
			if !ok {
				return nil, fmt.Errorf("indexing %s: %T is not a slim pod", name, obj)
			}
			vals := values(o)
			keys := make([]string, len(vals))
			for i, v := range vals {
				keys[i] = o.GetNamespace() + "/" + v
			}
			return keys, nil
		}
	}
	informer := toolscache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, toolscache.SharedIndexInformerOptions{
		Indexers: indexers, ObjectDescription: "pods (slim)"})
	// Before the store: a pod is slimmed as it arrives, and the whole one is garbage at once. What
	// is already slim (a tombstone's object, a resync) passes through.
	if err := informer.SetTransform(func(obj any) (any, error) {
		if pod, ok := obj.(*corev1.Pod); ok {
			return slim(pod), nil
		}
		return obj, nil
	}); err != nil {
		panic(err) // only returned once the informer has started
	}
	return informer
}

// Start runs the informer until ctx ends (manager.Runnable).
func (p *SlimPods[T]) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, informer := range p.informers {
		wg.Go(func() { informer.RunWithContext(ctx) })
	}
	wg.Wait()
	return nil
}

// NeedLeaderElection is false: every replica keeps its pods current, as it keeps its cache.
func (p *SlimPods[T]) NeedLeaderElection() bool { return false }

// List returns the pods of namespace that index holds under value; none for a namespace not
// watched. The pods are the store's own: read them, never change them.
func (p *SlimPods[T]) List(index, namespace, value string) ([]T, error) {
	informer := p.informerOf(namespace)
	if informer == nil {
		return nil, nil
	}
	return slimPodsOf[T](informer.GetIndexer().ByIndex(index, namespace+"/"+value))
}

// Get returns the pod key; false when it is not in the store (or its namespace is not watched).
// The pod is the store's own: read it, never change it.
func (p *SlimPods[T]) Get(key types.NamespacedName) (T, bool) {
	var zero T
	informer := p.informerOf(key.Namespace)
	if informer == nil {
		return zero, false
	}
	obj, ok, err := informer.GetStore().GetByKey(key.Namespace + "/" + key.Name)
	if err != nil || !ok {
		return zero, false
	}
	t, ok := obj.(T)
	return t, ok
}

// InNamespace returns every pod of namespace; none for a namespace not watched. The pods are the
// store's own: read them, never change them.
func (p *SlimPods[T]) InNamespace(namespace string) ([]T, error) {
	informer := p.informerOf(namespace)
	if informer == nil {
		return nil, nil
	}
	return slimPodsOf[T](informer.GetIndexer().ByIndex(toolscache.NamespaceIndex, namespace))
}

// WaitForSync waits until every informer has listed its pods, or ctx ends.
func (p *SlimPods[T]) WaitForSync(ctx context.Context) error {
	var synced []toolscache.InformerSynced
	for _, informer := range p.informers {
		synced = append(synced, informer.HasSynced)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		return errors.New("pods (slim) informer did not sync")
	}
	return nil
}

// informerOf returns the informer holding namespace's pods; nil when namespace is not watched.
func (p *SlimPods[T]) informerOf(namespace string) toolscache.SharedIndexInformer {
	if informer, ok := p.informers[namespace]; ok {
		return informer
	}
	return p.informers[corev1.NamespaceAll]
}

func slimPodsOf[T client.Object](objs []any, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out, nil
}

// Source is the informer as a controller's watch (WatchesRawSource): h maps each pod event that
// passes every predicate to requests. The controller starts its workers once the informer has
// synced, as it does for the manager's own informers.
func (p *SlimPods[T]) Source(h handler.TypedEventHandler[T, reconcile.Request], predicates ...predicate.TypedPredicate[T]) source.SyncingSource {
	return &slimPodsSource[T]{pods: p, handler: h, predicates: predicates}
}

type slimPodsSource[T client.Object] struct {
	pods       *SlimPods[T]
	handler    handler.TypedEventHandler[T, reconcile.Request]
	predicates []predicate.TypedPredicate[T]
}

func (s *slimPodsSource[T]) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	for _, informer := range s.pods.informers {
		src := &source.TypedInformer[T, reconcile.Request]{Informer: informer, Handler: s.handler, Predicates: s.predicates}
		if err := src.Start(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (s *slimPodsSource[T]) WaitForSync(ctx context.Context) error { return s.pods.WaitForSync(ctx) }

func (s *slimPodsSource[T]) String() string { return "slim pods" }
