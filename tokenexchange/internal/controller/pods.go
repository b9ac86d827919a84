package controller

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// podReferrers maps a pod event to the TokenExchange whose ConfigMap the pod mounts
// (tokenExchangeConfigMap): the ConfigMap's controller owner, read from the cache, which holds only this
// controller's ConfigMaps. The pods a reconcile counts are exactly those (podTokenExchangeIndex),
// so no other TokenExchange needs waking, and the cost of an event does not grow with the
// namespace's TokenExchanges. A ConfigMap not written yet needs no mapping: the reconcile that
// writes it counts the pods afterwards, and its arrival in the cache (Owns) runs that reconcile
// again. (An index of TokenExchanges by the ConfigMap they render did the same for ≈ 0.3 MB of
// heap at 1,000 TokenExchanges.)
func (r *Reconciler) podReferrers(ctx context.Context, o *cachedPod) []reconcile.Request {
	if o.configMap == "" {
		return nil
	}
	var cm corev1.ConfigMap
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.configMap}, &cm); err != nil {
		if !apierrors.IsNotFound(err) {
			logf.FromContext(ctx).Error(err, "reading the ConfigMap of a pod", "pod", client.ObjectKeyFromObject(o), "configMap", o.configMap)
		}
		return nil
	}
	ref := metav1.GetControllerOf(&cm)
	if ref == nil || ref.Kind != "TokenExchange" || !strings.HasPrefix(ref.APIVersion, v1alpha1.GroupVersion.Group+"/") {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.Namespace, Name: ref.Name}}}
}

// pods lists the selected pods that mount ConfigMap cmName (tokenExchangeConfigMap) (the only ones
// summarizePods counts), through podTokenExchangeIndex.
func (r *Reconciler) pods(namespace string, selector labels.Selector, cmName string) ([]*cachedPod, error) {
	all, err := r.PodCache.List(podTokenExchangeIndex, namespace, cmName)
	if err != nil {
		return nil, err
	}
	selected := all[:0:0]
	for _, p := range all {
		if selector.Matches(labels.Set(p.Labels)) {
			selected = append(selected, p)
		}
	}
	return selected, nil
}

type podSummary struct {
	// pods are the running pods that mount the ConfigMap.
	pods     []*cachedPod
	identity *v1alpha1.IdentityStatus
}

// summarizePods counts the running pods that mount ConfigMap cmName as the injector does
// (tokenExchangeConfigMap), and reports a sidecar as ready when it is ready in all of them.
func summarizePods(pods []*cachedPod, cmName string) podSummary {
	var configured []*cachedPod
	for _, p := range pods {
		if p.running && p.DeletionTimestamp.IsZero() && p.configMap == cmName {
			configured = append(configured, p)
		}
	}
	id := &v1alpha1.IdentityStatus{}
	if len(configured) > 0 {
		id.SpiffeEnabled = allReady(configured, contract.ComponentSpiffeHelper)
		id.IdpRegistered = allReady(configured, contract.ComponentClientRegistration)
		id.InboundProxyReady = allReady(configured, contract.ComponentAuthProxy)
		id.OutboundProxyReady = allReady(configured, contract.ComponentEnvoyProxy)
	}
	return podSummary{pods: configured, identity: id}
}

// allReady: the component is ready in every pod.
func allReady(pods []*cachedPod, component string) bool {
	for _, p := range pods {
		if p.ready&identityComponentBit(component) == 0 {
			return false
		}
	}
	return true
}

// cachedPod is what the controller reads of a pod, and all its pod informer keeps of one
// (kit.SlimPods): a corev1.Pod costs ≈ 2.4 KB in a cache even with every field but these
// dropped; this costs what its fields do. Of the metadata it keeps what identifies the pod (the
// prober remembers pods by UID), its labels (the workload's selector) and its deletion.
type cachedPod struct {
	metav1.ObjectMeta
	// configMap is the pod's ConfigMap {workload}-token-exchange (tokenExchangeConfigMap); "" without one.
	configMap string
	// running: the pod's phase is Running.
	running bool
	// ip is the pod IP the status prober asks.
	ip string
	// roles are the components that run a role with a status port, sorted (the prober asks each
	// on its port, whether the component has a container of its own or shares the authbridge one).
	roles []string
	// started is when the kubelet took the pod (status.startTime; zero before).
	started time.Time
	// controller is the pod's controller (its controller owner reference), when it has one.
	controller *metav1.OwnerReference
	// ready holds the identity components whose container is ready (identityComponentBit): a
	// native sidecar (init container, restartPolicy Always) or a classic container, depending on
	// the injector's configuration; both are looked at. One container may run several components
	// (contract.ContainerAuthbridge).
	ready uint8
}

// newCachedPod is the pod informer's transform: what summarizePods, the status prober, the
// selector match and the index read.
func newCachedPod(p *corev1.Pod) *cachedPod {
	c := &cachedPod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: unique.Make(p.Namespace).Value(), UID: p.UID,
			ResourceVersion: p.ResourceVersion, DeletionTimestamp: p.DeletionTimestamp, Labels: p.Labels},
		running: p.Status.Phase == corev1.PodRunning,
		ip:      p.Status.PodIP,
		roles:   roleComponents(p),
	}
	if p.Status.StartTime != nil {
		c.started = p.Status.StartTime.Time
	}
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		c.controller = &metav1.OwnerReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID}
	}
	c.configMap = tokenExchangeConfigMap(p)
	components := containerComponents(p)
	for _, statuses := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, st := range statuses {
			if st.Ready {
				for _, component := range components[st.Name] {
					c.ready |= identityComponentBit(component)
				}
			}
		}
	}
	return c
}

// tokenExchangeConfigMap returns the ConfigMap {workload}-token-exchange the injector gave pod,
// "" without one: projected into the identity volume (injection v4), or mounted as a volume of its
// own (v1 to v3, whose pods keep running until their workload's next rollout).
func tokenExchangeConfigMap(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.Name == contract.VolumeIdentity && v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil {
					return src.ConfigMap.Name
				}
			}
		case v.Name == contract.VolumeTokenExchange && v.ConfigMap != nil:
			return v.ConfigMap.Name
		}
	}
	return ""
}

// GetObjectKind: the cache holds pods only, so no kind is carried.
func (p *cachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the pod (client.Object); the slices and maps it shares with no one are
// copied too.
func (p *cachedPod) DeepCopyObject() runtime.Object {
	c := *p
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.roles = slices.Clone(p.roles)
	if p.controller != nil {
		ref := *p.controller
		c.controller = &ref
	}
	return &c
}

// containerComponents maps the containers of pod that run identity components to those
// components (contract.ComponentsOfContainer): a container named after its component, as
// injectors before the combined sidecar rendered them, or the authbridge container running
// several roles. A component is ready when the container that runs it is.
func containerComponents(pod *corev1.Pod) map[string][]string {
	out := map[string][]string{}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if components := contract.ComponentsOfContainer(c.Name, c.Args); len(components) > 0 {
				out[c.Name] = components
			}
		}
	}
	return out
}

// roleComponents lists the components of pod that run a role with a status port, sorted, in a
// slice of exactly their number (the cache holds it for the pod's lifetime).
func roleComponents(pod *corev1.Pod) []string {
	var out []string
	for _, components := range containerComponents(pod) {
		for _, c := range components {
			if _, ok := statusPorts[c]; ok && !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	sort.Strings(out)
	return slices.Clip(out)
}

// identityComponentBit is component's bit in cachedPod.ready; 0 for a container that is not an
// identity component.
func identityComponentBit(component string) uint8 {
	switch component {
	case contract.ComponentSpiffeHelper:
		return 1
	case contract.ComponentClientRegistration:
		return 2
	case contract.ComponentAuthProxy:
		return 4
	case contract.ComponentEnvoyProxy:
		return 8
	}
	return 0
}
