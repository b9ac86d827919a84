// Package podcache is what the agentcard controller keeps of pods: the small Pod type its
// informers hold, the label index a sync finds an AgentCard's pods by, and where a pod serves its
// card.
package podcache

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kagenti/platform/agentcard/internal/intern"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// Pod is what agentcard keeps of a pod: what a sync, the pod watch's predicate and the LabelGuard
// read, and nothing else. Of the metadata: name, namespace, UID, resourceVersion (the guard's
// optimistic lock), the creation timestamp, whether it is terminating, and the labels; of the spec:
// the service account (expected SPIFFE identity) and the card port (cardPort); of the status: the
// IP and whether it serves (podServes). A cached pod holds ≈ 730 bytes with its labels, name and
// UID (BenchmarkPodFootprint), where a corev1.Pod trimmed to the same fields held ≈ 2.3 KB (its
// empty spec and status structs alone are 1.2 KB).
//
// It embeds ObjectMeta (only the fields above set) so that the informer's store keys it like any
// object and controller-runtime's event handlers take it as a client.Object.
type Pod struct {
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
func (p *Pod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (p *Pod) DeepCopyObject() runtime.Object {
	out := *p
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// Key is the pod's namespace/name.
func (p *Pod) Key() types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}

// From returns what agentcard keeps of p: a fresh object that shares nothing with the decoded
// one (which is then garbage). Strings every pod repeats (namespace, label keys and values,
// service account) are interned: thousands of pods hold one copy.
func From(p *corev1.Pod) *Pod {
	out := &Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: intern.String(p.Namespace), UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp, Labels: intern.Labels(p.Labels),
		},
		ServiceAccount: intern.String(p.Spec.ServiceAccountName),
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

// Indexes are the indexes of agentcard's pod informers, besides the namespace.
var Indexes = map[string]kit.SlimPodIndexer[*Pod]{LabelIndex: func(p *Pod) []string { return IndexValues(p) }}

// New is agentcard's pod informers over cs, for the namespaces the controller watches (all
// when empty), not started: the unit tests' way in (Setup uses kit.NewSlimPods, which the manager
// starts). Nothing in agentcard reads a pod through the manager's client (which would start
// controller-runtime's typed pod cache again), only through these informers.
func New(cs kubernetes.Interface, namespaces []string) *kit.SlimPods[*Pod] {
	return kit.NewSlimPodsFor(cs, namespaces, From, Indexes)
}

// Selected lists the pods of namespace that sel matches, sorted by name, through LabelIndex
// when sel has an indexed requirement, else every pod of the namespace. The pods are the cache's
// own: read-only, their labels above all.
func Selected(pods *kit.SlimPods[*Pod], namespace string, sel labels.Selector) ([]*Pod, error) {
	var candidates []*Pod
	var err error
	if label, ok := indexedRequirement(sel); ok {
		candidates, err = pods.List(LabelIndex, namespace, label)
	} else {
		candidates, err = pods.InNamespace(namespace)
	}
	if err != nil {
		return nil, err
	}
	selected := candidates[:0]
	for _, p := range candidates {
		if sel.Matches(labels.Set(p.Labels)) {
			selected = append(selected, p)
		}
	}
	sort.Slice(selected, func(i, j int) bool { return selected[i].Name < selected[j].Name })
	return selected, nil
}
