package controller

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/resources"
	"github.com/kagenti/platform/pkg/duck"
)

// DefaultPort is the card port when the pod names no "a2a" or "http" container port.
const DefaultPort = 8081

// podSelector returns the label selector of the card's pods: the workload's (targetRef mode) or
// spec.selector.
func (r *CardReconciler) podSelector(ctx context.Context, c *v1alpha1.AgentCard) (labels.Selector, error) {
	if c.Spec.TargetRef != nil {
		w, err := r.Resolver.Resolve(ctx, c.Namespace, *c.Spec.TargetRef)
		if err != nil {
			if reason := duck.ReasonOf(err); reason != "" {
				return nil, &resources.SelectorError{Reason: reason, Message: err.Error()}
			}
			return nil, err
		}
		sel, err := w.Selector()
		if err != nil {
			if reason := duck.ReasonOf(err); reason != "" {
				return nil, &resources.SelectorError{Reason: reason, Message: err.Error()}
			}
			return nil, &resources.SelectorError{Reason: duck.ReasonUnsupportedKind, Message: err.Error()}
		}
		return sel, nil
	}
	if c.Spec.Selector == nil {
		return nil, &resources.SelectorError{Reason: v1alpha1.ReasonInvalidSelector, Message: "spec.selector or spec.targetRef is required"}
	}
	sel, err := metav1.LabelSelectorAsSelector(c.Spec.Selector)
	if err != nil {
		return nil, &resources.SelectorError{Reason: v1alpha1.ReasonInvalidSelector, Message: fmt.Sprintf("spec.selector: %v", err)}
	}
	if sel.Empty() {
		return nil, &resources.SelectorError{Reason: v1alpha1.ReasonInvalidSelector, Message: "spec.selector must not be empty (it would select every pod in the namespace)"}
	}
	return sel, nil
}

// PodLabelIndex indexes the cached pods by their labels ("key=value"): a sync lists the pods of one
// equality requirement of its selector, not every pod of the namespace (with 10,000 AgentCards in
// one namespace, scanning it on every sync took most of the controller's CPU). Labels no sync
// looks its pods up by (unindexedPodLabels) are left out.
const PodLabelIndex = "kagenti.io/pod-label"

// unindexedPodLabels are the pod labels the index leaves out: this controller's own verdict, on
// every pod it syncs with one of two values (an index entry listing every such pod, which no
// selector can use: the label is agentcard's output, never what selects an agent's pods), and the
// labels the workload controllers set to a value unique to one pod or one revision, which a
// selector shares with a label the index keeps (a ReplicaSet's pod-template-hash comes with the
// Deployment's labels) or, alone, selects one pod (the namespace scan is then as cheap).
var unindexedPodLabels = map[string]bool{
	v1alpha1.LabelSignatureVerified:            true,
	"pod-template-hash":                        true,
	"controller-revision-hash":                 true,
	"statefulset.kubernetes.io/pod-name":       true,
	"apps.kubernetes.io/pod-index":             true,
	"batch.kubernetes.io/job-completion-index": true,
}

// PodIndex looks the cached pods up by PodLabelIndex.
type PodIndex interface {
	ByIndex(indexName, indexedValue string) ([]any, error)
}

// IndexPodLabels registers PodLabelIndex on the pod informer of c and returns the index to look
// pods up by, keyed "namespace/key=value". It is registered on the informer itself rather than
// through the manager's field indexer, which stores every value twice (once per namespace and
// once more under a cluster-wide key no sync asks for): a third of the controller's index entries
// at 1,000 AgentCards × 3 pods. A cache that is not one informer per kind (a manager watching a
// list of namespaces) gets the field index instead, and a nil PodIndex.
func IndexPodLabels(ctx context.Context, c cache.Cache) (PodIndex, error) {
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, err
	}
	if si, ok := inf.(interface{ GetIndexer() toolscache.Indexer }); ok {
		if err := inf.AddIndexers(toolscache.Indexers{PodLabelIndex: namespacedPodIndexValues}); err != nil {
			return nil, err
		}
		return si.GetIndexer(), nil
	}
	return nil, c.IndexField(ctx, &corev1.Pod{}, PodLabelIndex, podIndexValues)
}

// namespacedPodIndexValues are a pod's entries in the informer's PodLabelIndex:
// "namespace/key=value".
func namespacedPodIndexValues(obj any) ([]string, error) {
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

// podIndexValues are a pod's labels as PodLabelIndex keeps them ("key=value").
func podIndexValues(o client.Object) []string {
	out := make([]string, 0, len(o.GetLabels()))
	for k, v := range o.GetLabels() {
		if !unindexedPodLabels[k] {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// indexedRequirement returns a "key=value" of PodLabelIndex that every pod sel matches carries
// (an equality requirement, or an In with one value, on an indexed label), to list them through
// the index; false when sel has none: then the namespace is scanned.
func indexedRequirement(sel labels.Selector) (string, bool) {
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		if unindexedPodLabels[r.Key()] {
			continue
		}
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if vals := r.Values(); vals.Len() == 1 {
				return r.Key() + "=" + vals.UnsortedList()[0], true
			}
		}
	}
	return "", false
}

// selectedPods lists the selected pods by name. Only those isServing are fetched; the others
// keep a verdict given while they served (same pod, same IP), so a readiness blip does not take
// the label away. The pods are shallow copies of the cache's own (no deep copy per pod and
// sync): read-only, their labels above all.
func (r *CardReconciler) selectedPods(ctx context.Context, namespace string, sel labels.Selector) ([]corev1.Pod, error) {
	label, indexed := indexedRequirement(sel)
	if indexed && r.PodIndex != nil {
		return r.indexedPods(namespace+"/"+label, sel)
	}
	opts := []client.ListOption{client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy}
	if indexed {
		opts = append(opts, client.MatchingFields{PodLabelIndex: label})
	}
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, opts...); err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// indexedPods lists the pods of PodIndex's entry key that sel matches, sorted by name.
func (r *CardReconciler) indexedPods(key string, sel labels.Selector) ([]corev1.Pod, error) {
	objs, err := r.PodIndex.ByIndex(PodLabelIndex, key)
	if err != nil {
		return nil, err
	}
	pods := make([]corev1.Pod, 0, len(objs))
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if ok && sel.Matches(labels.Set(p.Labels)) {
			pods = append(pods, *p)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods, nil
}

// isServing: Ready, with an IP, running and not terminating.
func isServing(p *corev1.Pod) bool {
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

// defaultPaths are the card paths tried when spec.endpoint names none; shared by every pod's sync
// state, never modified.
var defaultPaths = []string{fetch.PathAgentCard, fetch.PathLegacy}

// endpointFor resolves scheme, port and paths for a pod from spec.endpoint and the pod's ports.
func endpointFor(c *v1alpha1.AgentCard, p *corev1.Pod) (scheme string, port int32, paths []string) {
	scheme, paths = "http", defaultPaths
	if e := c.Spec.Endpoint; e != nil {
		if e.Scheme != "" {
			scheme = e.Scheme
		}
		if e.Path != "" {
			paths = []string{e.Path}
		}
		port = e.Port
	}
	if port == 0 {
		port = namedPort(p)
	}
	return scheme, port, paths
}

func namedPort(p *corev1.Pod) int32 {
	if cp, ok := cardPort(p); ok {
		return cp.ContainerPort
	}
	return DefaultPort
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

// patchVerifiedLabel sets kagenti.io/signature-verified on the pod itself (a metadata-only merge
// patch: no restart, never the workload's template) when it differs.
func (r *CardReconciler) patchVerifiedLabel(ctx context.Context, p *corev1.Pod, verified bool) error {
	want := fmt.Sprint(verified)
	if p.Labels[v1alpha1.LabelSignatureVerified] == want {
		return nil
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, v1alpha1.LabelSignatureVerified, want)
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	err := r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, []byte(patch)))
	return client.IgnoreNotFound(err)
}
