package controller_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
)

// startRolePodAt is startRolePod for a pod that the kubelet started at started, controlled by
// owner (nil: a bare pod).
func startRolePodAt(t *testing.T, ns, name, app string, owner *metav1.OwnerReference, started time.Time, projected func(*rolePod)) *rolePod {
	t.Helper()
	sidecars := []string{contract.ComponentSpiffeHelper, contract.ComponentAuthProxy, contract.ComponentEnvoyProxy}
	p := injectedPod(ns, name, app, sidecars)
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	rp := runRolePodOn(t, p, sidecars, map[string]int{contract.ComponentAuthProxy: sidecar.InboundStatusPort,
		contract.ComponentEnvoyProxy: sidecar.OutboundStatusPort}, nil, projected)
	must(t, updateStatusRetrying(context.Background(), rp.pod, func(p *corev1.Pod) { p.Status.StartTime = &metav1.Time{Time: started} }))
	return rp
}

func updateStatusRetrying(ctx context.Context, p *corev1.Pod, change func(*corev1.Pod)) error {
	for {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		change(p)
		err := k8s.Status().Update(ctx, p)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

func replicaSetOwner(name string) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name,
		UID: types.UID("rs-" + name), Controller: ptr.To(true)}
}

func podGone(ctx context.Context, ns, name string) (bool, string) {
	var p corev1.Pod
	err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)
	switch {
	case apierrors.IsNotFound(err):
		return true, "gone"
	case err != nil:
		return false, err.Error()
	case p.DeletionTimestamp != nil:
		return true, "terminating"
	}
	return false, "still there"
}

// A Deployment applied together with its TokenExchange: its first pods can start before the
// ConfigMap exists, and then run the injector's defaults of the startup settings for their life.
// The controller evicts exactly those pods (their ReplicaSet starts them again with the
// ConfigMap), once; it leaves alone a pod that ran long before the TokenExchange (the user's to
// restart), a bare pod (nothing would start it again), and a pod that started on the content.
func TestPodsStartedBeforeTheirConfigMapAreRestarted(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	const cmName = "agent-token-exchange"
	must(t, k8s.Create(ctx, deployment(ns, "agent", 3, true)))
	now := time.Now()

	raced := startRolePodAt(t, ns, "agent-raced", "agent", replicaSetOwner("agent-1"), now, nil)
	// Held: its sidecars run, but hold the agent back (a native sidecar's startup probe fails on
	// the defaults), so the pod is Pending, for good unless it is restarted.
	held := startRolePodAt(t, ns, "agent-held", "agent", replicaSetOwner("agent-1"), now, nil)
	must(t, updateStatusRetrying(ctx, held.pod, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }))
	old := startRolePodAt(t, ns, "agent-old", "agent", replicaSetOwner("agent-0"), now.Add(-time.Hour), nil)
	bare := startRolePodAt(t, ns, "agent-bare", "agent", nil, now, nil)

	te := tokenExchange(ns, "tx", "agent")
	te.Spec.Outbound = &v1alpha1.OutboundSpec{TrafficInterception: &v1alpha1.TrafficInterceptionSpec{ProxyPort: ptr.To[int32](15200)}}
	must(t, k8s.Create(ctx, te))
	waitCondition(t, ns, "tx", v1alpha1.ConditionConfigMapReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)
	// Before the kubelet projects the content, nothing is pending: no pod is touched.
	waitPropagation(t, ns, "three pods, none on the content", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.Pods == 3 && c.Reason == v1alpha1.ReasonPropagating
	})
	for _, p := range []*rolePod{raced, old, bare} {
		gone, _ := podGone(ctx, ns, p.pod.Name)
		assert.False(t, gone, "pod %s evicted before its roles reported a pending startup setting", p.pod.Name)
	}

	// The kubelet's refresh: the run-time settings follow, the proxy port cannot.
	for _, p := range []*rolePod{raced, held, old, bare} {
		p.sync(t, ns, cmName)
	}
	eventually(t, "the raced pod evicted", func(ctx context.Context) (bool, string) { return podGone(ctx, ns, "agent-raced") })
	eventually(t, "the held pod evicted", func(ctx context.Context) (bool, string) { return podGone(ctx, ns, "agent-held") })

	// The replacement starts with the ConfigMap mounted: on the content, nothing pending.
	startRolePodAt(t, ns, "agent-raced-2", "agent", replicaSetOwner("agent-1"), time.Now(), func(rp *rolePod) { rp.sync(t, ns, cmName) })
	got := waitPropagation(t, ns, "the replacement on the content, the other two waiting for a restart", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		s := condition(te, v1alpha1.ConditionStartupSettingsCurrent)
		return te.Status.Pods == 3 && te.Status.ConfiguredPods == 3 && s != nil && s.Reason == v1alpha1.ReasonRestartRequired
	})
	s := condition(got, v1alpha1.ConditionStartupSettingsCurrent)
	assert.Contains(t, s.Message, "pod agent-bare (outbound.trafficInterception.proxyPort)")
	assert.Contains(t, s.Message, "pod agent-old (outbound.trafficInterception.proxyPort)")
	assert.NotContains(t, s.Message, "agent-raced-2")
	for _, name := range []string{"agent-old", "agent-bare", "agent-raced-2"} {
		gone, what := podGone(ctx, ns, name)
		assert.False(t, gone, "pod %s: %s", name, what)
	}

	events := eventMessages(ctx, t, ns, "tx", "PodRestarted")
	require.Len(t, events, 2, "one restart of each: %v", events)
	assert.Contains(t, events[0], "pod agent-held started before ConfigMap "+cmName+" existed")
	assert.Contains(t, events[1], "pod agent-raced started before ConfigMap "+cmName+" existed")
	assert.Contains(t, events[1], "ReplicaSet agent-1 starts it again with outbound.trafficInterception.proxyPort")
}

// eventMessages lists the notes of the Events of reason regarding the named object.
func eventMessages(ctx context.Context, t *testing.T, ns, name, reason string) []string {
	t.Helper()
	var out []string
	var list eventsv1.EventList
	must(t, k8s.List(ctx, &list, client.InNamespace(ns)))
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	slices.Sort(out)
	return out
}
