package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/resources"
)

// tokenExchangeConfigMapIndex indexes TokenExchanges by the name of the ConfigMap they render
// ({targetRef.name}-token-exchange, resources.ConfigMapName).
const tokenExchangeConfigMapIndex = "tokenexchange.configMapName"

func tokenExchangeConfigMap(o client.Object) []string {
	te, ok := o.(*v1alpha1.TokenExchange)
	if !ok {
		return nil
	}
	return []string{resources.ConfigMapName(te.Spec.TargetRef.Name)}
}

// podReferrers maps a pod event to the TokenExchanges whose ConfigMap the pod's token-exchange
// volume mounts, through two indexes: the pods a reconcile counts are exactly those
// (podTokenExchangeIndex), so no other TokenExchange needs waking, and the cost of an event does
// not grow with the namespace's TokenExchanges.
func (r *Reconciler) podReferrers(ctx context.Context, o client.Object) []reconcile.Request {
	cms := podTokenExchangeConfigMap(o)
	if len(cms) == 0 {
		return nil
	}
	var list v1alpha1.TokenExchangeList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()),
		client.MatchingFields{tokenExchangeConfigMapIndex: cms[0]}); err != nil {
		logf.FromContext(ctx).Error(err, "listing the TokenExchanges of a pod's ConfigMap", "pod", client.ObjectKeyFromObject(o), "configMap", cms[0])
		return nil
	}
	reqs := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return reqs
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

// containerNames keeps, by name only, the containers that run a role with a status port (what
// roleContainers looks for): a corev1.Container costs about 400 bytes even when only its name is
// set, and the agent's own containers are never read.
func containerNames(in []corev1.Container) []corev1.Container {
	return trimmedSlice(in, func(c corev1.Container) bool { _, ok := statusPorts[c.Name]; return ok },
		func(c corev1.Container) corev1.Container { return corev1.Container{Name: c.Name} })
}

// trimStatuses keeps the name and readiness of the identity components' containers (what
// summarizePods reads).
func trimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	return trimmedSlice(in, func(s corev1.ContainerStatus) bool { return identityComponent(s.Name) },
		func(s corev1.ContainerStatus) corev1.ContainerStatus {
			return corev1.ContainerStatus{Name: s.Name, Ready: s.Ready}
		})
}

// trimmedSlice returns trim of the elements of in that keep selects, in a slice of exactly their
// number (nil for none): the cache holds it for the pod's lifetime, and append's spare capacity
// would cost a whole element each (three of four injected containers kept made a slice of four).
func trimmedSlice[T any](in []T, keep func(T) bool, trim func(T) T) []T {
	n := 0
	for _, x := range in {
		if keep(x) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]T, 0, n)
	for _, x := range in {
		if keep(x) {
			out = append(out, trim(x))
		}
	}
	return out
}

func identityComponent(name string) bool {
	switch name {
	case configmap.ComponentSpiffeHelper, configmap.ComponentClientRegistration, configmap.ComponentAuthProxy, configmap.ComponentEnvoyProxy:
		return true
	}
	return false
}

func metav1ObjectMeta(p *corev1.Pod) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		Generation: p.Generation, CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		Labels: p.Labels, OwnerReferences: p.OwnerReferences,
	}
}
