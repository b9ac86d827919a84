package controller

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// SelectorIndex remembers, per namespace, the pod selector of each TokenExchange's resolved
// workload, so a pod event maps to its TokenExchanges without reading anything from the API
// server or walking owner references.
type SelectorIndex struct {
	mu sync.RWMutex
	ns map[string]map[string]labels.Selector
}

func NewSelectorIndex() *SelectorIndex {
	return &SelectorIndex{ns: map[string]map[string]labels.Selector{}}
}

func (x *SelectorIndex) Set(key types.NamespacedName, s labels.Selector) {
	x.mu.Lock()
	defer x.mu.Unlock()
	m := x.ns[key.Namespace]
	if m == nil {
		m = map[string]labels.Selector{}
		x.ns[key.Namespace] = m
	}
	m[key.Name] = s
}

func (x *SelectorIndex) Forget(key types.NamespacedName) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if m := x.ns[key.Namespace]; m != nil {
		delete(m, key.Name)
		if len(m) == 0 {
			delete(x.ns, key.Namespace)
		}
	}
}

// Requests returns a request for every TokenExchange whose workload selects a pod with these labels.
func (x *SelectorIndex) Requests(namespace string, podLabels map[string]string) []reconcile.Request {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []reconcile.Request
	set := labels.Set(podLabels)
	for name, s := range x.ns[namespace] {
		if s.Matches(set) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}})
		}
	}
	return out
}

// mapPod is the handler for pod events.
func (x *SelectorIndex) mapPod(_ context.Context, o client.Object) []reconcile.Request {
	return x.Requests(o.GetNamespace(), o.GetLabels())
}

// pods lists the selected pods whose token-exchange volume is ConfigMap cmName (the only ones
// summarizePods counts), through podTokenExchangeIndex.
func (r *Reconciler) pods(ctx context.Context, namespace string, selector labels.Selector, cmName string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: selector},
		client.MatchingFields{podTokenExchangeIndex: cmName}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

type podSummary struct {
	// pods are the running pods that mount the ConfigMap.
	pods     []*corev1.Pod
	identity *v1alpha1.IdentityStatus
}

// summarizePods counts the running pods that mount ConfigMap cmName as the injected
// token-exchange volume, and reports a sidecar as ready when it is ready in all of them.
func summarizePods(pods []corev1.Pod, cmName string) podSummary {
	var configured []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp.IsZero() && mountsTokenExchange(p, cmName) {
			configured = append(configured, p)
		}
	}
	id := &v1alpha1.IdentityStatus{}
	if len(configured) > 0 {
		id.SpiffeEnabled = allReady(configured, configmap.ComponentSpiffeHelper)
		id.IdpRegistered = allReady(configured, configmap.ComponentClientRegistration)
		id.InboundProxyReady = allReady(configured, configmap.ComponentAuthProxy)
		id.OutboundProxyReady = allReady(configured, configmap.ComponentEnvoyProxy)
	}
	return podSummary{pods: configured, identity: id}
}

func mountsTokenExchange(p *corev1.Pod, cmName string) bool {
	for _, v := range p.Spec.Volumes {
		if v.Name == configmap.VolumeTokenExchange && v.ConfigMap != nil && v.ConfigMap.Name == cmName {
			return true
		}
	}
	return false
}

// allReady: the sidecar is a native sidecar (init container, restartPolicy Always) or a classic
// container, depending on the injector's configuration; both are looked at.
func allReady(pods []*corev1.Pod, container string) bool {
	for _, p := range pods {
		if !containerReady(p.Status.InitContainerStatuses, container) && !containerReady(p.Status.ContainerStatuses, container) {
			return false
		}
	}
	return true
}

func containerReady(statuses []corev1.ContainerStatus, name string) bool {
	for _, s := range statuses {
		if s.Name == name {
			return s.Ready
		}
	}
	return false
}

// TrimPod is the cache transform for pods: it keeps only what summarizePods, the status prober
// and the selector match read (labels, volumes of ConfigMaps, container names, phase, pod IP,
// container readiness), which cuts the memory of the pod cache by an order of magnitude on real
// pods.
func TrimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	trimmed := &corev1.Pod{
		TypeMeta:   p.TypeMeta,
		ObjectMeta: metav1ObjectMeta(p),
		Spec:       corev1.PodSpec{InitContainers: containerNames(p.Spec.InitContainers), Containers: containerNames(p.Spec.Containers)},
		Status: corev1.PodStatus{
			Phase:                 p.Status.Phase,
			PodIP:                 p.Status.PodIP,
			InitContainerStatuses: trimStatuses(p.Status.InitContainerStatuses),
			ContainerStatuses:     trimStatuses(p.Status.ContainerStatuses),
		},
	}
	for _, v := range p.Spec.Volumes {
		if v.ConfigMap != nil {
			trimmed.Spec.Volumes = append(trimmed.Spec.Volumes, corev1.Volume{Name: v.Name,
				VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: v.ConfigMap.LocalObjectReference}}})
		}
	}
	return trimmed, nil
}

func containerNames(in []corev1.Container) []corev1.Container {
	if in == nil {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{Name: c.Name}
	}
	return out
}

func trimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if in == nil {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(in))
	for i, s := range in {
		out[i] = corev1.ContainerStatus{Name: s.Name, Ready: s.Ready}
	}
	return out
}

func metav1ObjectMeta(p *corev1.Pod) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		Generation: p.Generation, CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		Labels: p.Labels, OwnerReferences: p.OwnerReferences,
	}
}
