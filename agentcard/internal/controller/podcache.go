package controller

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// pod is what agentcard keeps of a pod: what a sync, the pod watch's predicate and the LabelGuard
// read, and nothing else. Of the metadata: name, namespace, UID, resourceVersion (the guard's
// optimistic lock), the creation timestamp, whether it is terminating, and the labels; of the spec:
// the service account (expected SPIFFE identity) and the card port (cardPort); of the status: the
// IP and whether it serves (podServes). A cached pod holds ≈ 730 bytes with its labels, name and
// UID (BenchmarkPodFootprint), where a corev1.Pod trimmed to the same fields held ≈ 2.3 KB (its
// empty spec and status structs alone are 1.2 KB).
//
// It embeds ObjectMeta (only the fields above set) so that the informer's store keys it like any
// object and controller-runtime's event handlers take it as a client.Object.
type pod struct {
	metav1.ObjectMeta
	// ServiceAccount is spec.serviceAccountName.
	ServiceAccount string
	// IP is status.podIP.
	IP string
	// CardPort is the container port named "a2a", else "http" (cardPort); 0 when none is.
	CardPort int32
	// Serving: running, Ready, with an IP and not terminating.
	Serving bool
}

// GetObjectKind implements runtime.Object: a pod carries no TypeMeta.
func (p *pod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (p *pod) DeepCopyObject() runtime.Object {
	out := *p
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// key is the pod's namespace/name.
func (p *pod) key() types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}

// podFrom returns what agentcard keeps of p: a fresh object that shares nothing with the decoded
// one (which is then garbage). Strings every pod repeats (namespace, label keys and values,
// service account) are interned: thousands of pods hold one copy.
func podFrom(p *corev1.Pod) *pod {
	out := &pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: intern(p.Namespace), UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp, Labels: internLabels(p.Labels),
		},
		ServiceAccount: intern(p.Spec.ServiceAccountName),
		IP:             p.Status.PodIP,
		Serving:        podServes(p),
	}
	if cp, ok := cardPort(p); ok {
		out.CardPort = cp.ContainerPort
	}
	return out
}

// podServes: Ready, with an IP, running and not terminating.
func podServes(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// cardPort is the container port a pod serves its card on when spec.endpoint names none: the
// first named "a2a" in any container, else the first named "http".
func cardPort(p *corev1.Pod) (corev1.ContainerPort, bool) {
	for _, want := range []string{"a2a", "http"} {
		for _, ctr := range p.Spec.Containers {
			for _, cp := range ctr.Ports {
				if cp.Name == want {
					return cp, true
				}
			}
		}
	}
	return corev1.ContainerPort{}, false
}

// transformPod is the informers' transform: the decoded corev1.Pod becomes a pod before it is
// stored or handed to an event handler. A tombstone of a deleted pod is passed on as it is: its
// object was transformed when it was stored.
func transformPod(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return podFrom(o), nil
	case *pod, toolscache.DeletedFinalStateUnknown:
		return obj, nil
	default:
		return nil, fmt.Errorf("pod informer: unexpected %T", obj)
	}
}

// podInformers watch the pods of the namespaces the controller watches (one informer for all of
// them, or one per namespace) and keep them as pod, indexed by namespace and by PodLabelIndex.
// They replace controller-runtime's typed pod cache: nothing in agentcard reads a pod through the
// manager's client (which would start that cache again), only through podInformers.
type podInformers struct {
	// byNamespace holds the informer of each watched namespace, or of all under "".
	byNamespace map[string]toolscache.SharedIndexInformer
}

// newPodInformers builds the informers for namespaces (all when empty), listing and watching
// through cs.
func newPodInformers(cs kubernetes.Interface, namespaces []string) (*podInformers, error) {
	pods := cs.CoreV1()
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	pi := &podInformers{byNamespace: map[string]toolscache.SharedIndexInformer{}}
	for _, ns := range namespaces {
		lw := &toolscache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return pods.Pods(ns).List(ctx, o)
			},
			WatchFuncWithContext: pods.Pods(ns).Watch,
		}
		// A client that cannot stream a list (a fake clientset) is listed the old way.
		inf := toolscache.NewSharedIndexInformerWithOptions(toolscache.ToListWatcherWithWatchListSemantics(lw, cs), &corev1.Pod{}, toolscache.SharedIndexInformerOptions{
			ObjectDescription: "agentcard pods",
			Indexers: toolscache.Indexers{
				toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc,
				PodLabelIndex:             podLabelIndexKeys,
			},
		})
		if err := inf.SetTransform(transformPod); err != nil {
			return nil, err
		}
		pi.byNamespace[ns] = inf
	}
	return pi, nil
}

// Start runs the informers until ctx is done (manager.Runnable).
func (pi *podInformers) Start(ctx context.Context) error {
	for _, inf := range pi.byNamespace {
		go inf.RunWithContext(ctx)
	}
	<-ctx.Done()
	return nil
}

// NeedLeaderElection: the informers run in every replica, as the manager's caches do.
func (pi *podInformers) NeedLeaderElection() bool { return false }

// informerFor returns the informer holding namespace's pods; nil when it is not watched.
func (pi *podInformers) informerFor(namespace string) toolscache.SharedIndexInformer {
	if inf, ok := pi.byNamespace[metav1.NamespaceAll]; ok {
		return inf
	}
	return pi.byNamespace[namespace]
}

// get returns the cached pod key; false when it is not cached.
func (pi *podInformers) get(key types.NamespacedName) (*pod, bool) {
	inf := pi.informerFor(key.Namespace)
	if inf == nil {
		return nil, false
	}
	obj, ok, err := inf.GetStore().GetByKey(key.Namespace + "/" + key.Name)
	if err != nil || !ok {
		return nil, false
	}
	p, ok := obj.(*pod)
	return p, ok
}

// selected lists the pods of namespace that sel matches, sorted by name, through PodLabelIndex
// when sel has an indexed requirement, else through the namespace index. The pods are the
// cache's own: read-only.
func (pi *podInformers) selected(namespace string, sel labels.Selector) ([]*pod, error) {
	inf := pi.informerFor(namespace)
	if inf == nil {
		return nil, nil
	}
	var objs []any
	var err error
	if label, ok := indexedRequirement(sel); ok {
		objs, err = inf.GetIndexer().ByIndex(PodLabelIndex, namespace+"/"+label)
	} else {
		objs, err = inf.GetIndexer().ByIndex(toolscache.NamespaceIndex, namespace)
	}
	if err != nil {
		return nil, err
	}
	pods := make([]*pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*pod); ok && sel.Matches(labels.Set(p.Labels)) {
			pods = append(pods, p)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods, nil
}

// sources are the controller sources of the pod events, one per informer, each waited on
// before the controller's workers start.
func (pi *podInformers) sources(h handler.EventHandler, preds ...predicate.Predicate) []source.Source {
	var out []source.Source
	for _, inf := range pi.byNamespace {
		out = append(out, &syncedInformer{Informer: source.Informer{Informer: inf, Handler: h, Predicates: preds}, synced: inf.HasSynced})
	}
	return out
}

// syncedInformer is a source.Informer that the controller waits for (source.SyncingSource), as it
// waits for the manager's own caches: no sync may see an empty pod list because the informer has
// not listed yet.
type syncedInformer struct {
	source.Informer
	synced toolscache.InformerSynced
}

// WaitForSync implements source.SyncingSource.
func (s *syncedInformer) WaitForSync(ctx context.Context) error {
	if !toolscache.WaitForCacheSync(ctx.Done(), s.synced) {
		return fmt.Errorf("pod informer not synced: %w", ctx.Err())
	}
	return nil
}

// podLabelIndexKeys are a pod's entries in PodLabelIndex: "namespace/key=value".
func podLabelIndexKeys(obj any) ([]string, error) {
	o, ok := obj.(client.Object)
	if !ok {
		return nil, fmt.Errorf("pod index: %T is not an object", obj)
	}
	vals := podIndexValues(o)
	for i, v := range vals {
		vals[i] = o.GetNamespace() + "/" + v
	}
	return vals, nil
}
