package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

// A pod's readiness, IP and labels reach the sync through the controller's own pod informer (the
// small pod type, not controller-runtime's cache): each change is reflected in the AgentCard's
// status long before its periodic sync (one hour here) could have noticed it.
func TestPodChangesReachTheSync(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	serveCard(t, "127.42.9.1", testcards.Weather("1.0.0"))
	serveCard(t, "127.42.9.2", testcards.Weather("2.0.0"))
	labels := map[string]string{"app": "changing"}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "changing-a", Labels: labels},
		Spec: corev1.PodSpec{ServiceAccountName: "agent", Containers: []corev1.Container{{Name: "agent", Image: "agent:1",
			Ports: []corev1.ContainerPort{{Name: "a2a", ContainerPort: cardPort}}}}},
	}
	require.NoError(t, k8s.Create(ctx, p))
	// Running with an IP, not Ready: not fetched.
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.42.9.1", PodIPs: []corev1.PodIP{{IP: "127.42.9.1"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}}
	require.NoError(t, k8s.Status().Update(ctx, p))
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "changing", labels, func(c *v1alpha1.AgentCard) {
		c.Spec.SyncPeriod = &metav1.Duration{Duration: time.Hour}
	})))
	// The first sync happened and saw no serving pod.
	eventually(t, 30*time.Second, func() string {
		c := getCard(t, ns, "changing")
		if c.Status.ObservedGeneration != c.Generation || len(c.Status.Cards) != 0 || cond(c, "Ready") == "<none>" {
			return fmt.Sprintf("observed %d of %d, %d entries, Ready=%s", c.Status.ObservedGeneration, c.Generation, len(c.Status.Cards), cond(c, "Ready"))
		}
		return ""
	})

	// Shorter than the periodic sync's, so only a pod event can satisfy each step.
	const step = 20 * time.Second
	// Each IP serves its own card: the entry's hash says which one was fetched.
	var hash string
	entryIs := func(ip string) func() string {
		return func() string {
			e := entry(getCard(t, ns, "changing"), "changing-a")
			if e == nil || e.PodIP != ip || e.FetchStatus != v1alpha1.FetchSuccess || e.CardHash == "" || e.CardHash == hash {
				return fmt.Sprintf("entry %+v (previous card %q)", e, hash)
			}
			hash = e.CardHash
			return ""
		}
	}

	setStatus := func(mutate func(*corev1.PodStatus)) {
		var cur corev1.Pod
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(p), &cur))
		mutate(&cur.Status)
		require.NoError(t, k8s.Status().Update(ctx, &cur))
	}
	setStatus(func(s *corev1.PodStatus) { s.Conditions[0].Status = corev1.ConditionTrue })
	eventually(t, step, entryIs("127.42.9.1"))

	setStatus(func(s *corev1.PodStatus) {
		s.PodIP, s.PodIPs = "127.42.9.2", []corev1.PodIP{{IP: "127.42.9.2"}}
	})
	eventually(t, step, entryIs("127.42.9.2"))

	var cur corev1.Pod
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(p), &cur))
	cur.Labels["app"] = "elsewhere"
	require.NoError(t, k8s.Update(ctx, &cur))
	eventually(t, step, func() string {
		if c := getCard(t, ns, "changing"); len(c.Status.Cards) != 0 {
			return fmt.Sprintf("%d entries for a pod no longer selected", len(c.Status.Cards))
		}
		return ""
	})
}
