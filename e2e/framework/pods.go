package framework

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PodTimeout is how long PodsOf and WaitPod wait by default: generous for kind pulling images,
// the local cluster needs a few seconds.
const PodTimeout = 2 * time.Minute

// PodsOf waits until the workload selected by selector in ns has want Running and Ready pods with
// an IP (want <= 0: at least one, and every matching pod ready), and returns them sorted by name.
// Pods being deleted are ignored, so it also works across a rollout.
func PodsOf(t testing.TB, c client.Client, ns string, selector map[string]string, want int) []corev1.Pod {
	t.Helper()
	var ready []corev1.Pod
	Eventually(t, PodTimeout, Sprintf("pods %v in %s running and ready", selector, ns),
		func(ctx context.Context) (bool, string, error) {
			var list corev1.PodList
			if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels(selector)); err != nil {
				return false, "", err
			}
			ready = ready[:0]
			var notReady []string
			live := 0
			for _, p := range list.Items {
				if p.DeletionTimestamp != nil {
					continue
				}
				live++
				if PodReady(&p) {
					ready = append(ready, p)
				} else {
					notReady = append(notReady, p.Name+"="+podState(&p))
				}
			}
			msg := Sprintf("%d/%d ready; not ready: [%s]", len(ready), live, strings.Join(notReady, " "))
			if want > 0 {
				return len(ready) == want && live == want, msg, nil
			}
			return len(ready) > 0 && len(notReady) == 0, msg, nil
		})
	sort.Slice(ready, func(i, j int) bool { return ready[i].Name < ready[j].Name })
	return ready
}

// WaitPod waits until the named pod is Running and Ready with an IP and returns it.
func WaitPod(t testing.TB, c client.Client, ns, name string) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	Eventually(t, PodTimeout, Sprintf("pod %s/%s running and ready", ns, name),
		func(ctx context.Context) (bool, string, error) {
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
				return false, err.Error(), client.IgnoreNotFound(err)
			}
			return PodReady(&pod), podState(&pod), nil
		})
	return &pod
}

// PodReady reports whether the pod is Running, has an IP and its Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podState is a short human description of where a pod is, for failure messages.
func podState(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	if p.Spec.NodeName == "" {
		s += "/unscheduled"
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += "/" + string(c.Type) + ":" + c.Message
		}
	}
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			s += "/" + cs.Name + ":" + w.Reason
		}
	}
	return s
}
