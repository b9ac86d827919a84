package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// Restarting the pods that started before their ConfigMap existed.
//
// A Deployment applied together with its TokenExchange (one `kubectl apply -f dir/`, one GitOps
// sync) races the controller: the ConfigMap is written once the target resolves, and a pod the
// kubelet starts before that mounts an empty volume. Its run-time settings follow the ConfigMap
// when it arrives; its startup settings (spiffe-helper's audience, the intercepted ports) stay
// the injector's defaults for the pod's life. Nobody asked for those pods to run the defaults,
// and their controller starts a replacement with the ConfigMap mounted, so the controller evicts
// them (the Eviction API: PodDisruptionBudgets are honoured).
//
// Only pods that could not have had the content are restarted, running or held back by their
// sidecars (heldPods): their roles report StartedWithoutContent and a pending restart, they
// started no later than the ConfigMap was created and no earlier
// than restartWindow before the TokenExchange was (a workload running before anyone asked for
// this identity is the user's to restart: StartupSettingsCurrent says RestartRequired), and a
// ReplicaSet, StatefulSet or DaemonSet replaces them (a Job's pod or a bare pod is not
// recreated the same way). A replacement starts after the ConfigMap exists, with its content,
// so a pod is restarted at most once.

// DefaultRestartWindow is how long before its TokenExchange a pod may have started and still be
// restarted: a GitOps sync or `kubectl apply` applies a directory in seconds.
const DefaultRestartWindow = 2 * time.Minute

// restartableControllers are the controllers that start a replacement for an evicted pod from
// the same template.
var restartableControllers = map[string]bool{"ReplicaSet": true, "StatefulSet": true, "DaemonSet": true}

// heldKey is the prober's key for a TokenExchange's held pods (heldPods), apart from its running ones.
func heldKey(key types.NamespacedName) types.NamespacedName {
	return types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "\x00held"}
}

// heldPods are the pods of pods that mount ConfigMap cmName, started, with an IP, and are not
// Running yet: their identity sidecars run, and hold the agent back (a native sidecar's startup
// probe). A pod that started on the injector's defaults may be held for good when a startup
// setting the ConfigMap would change is what keeps it from starting: it counts for nothing else
// (pods, configuredPods describe running pods), but it is restarted like a running one.
func heldPods(pods []*cachedPod, cmName string) []*cachedPod {
	var held []*cachedPod
	for _, p := range pods {
		if !p.running && p.DeletionTimestamp.IsZero() && p.configMap == cmName && p.ip != "" && !p.started.IsZero() {
			held = append(held, p)
		}
	}
	return held
}

// restartPods restarts the running pods of prop and the held pods of all (asked here) that
// started before ConfigMap cmName existed. It returns what it did and how soon to look at held
// pods again (0: none is held).
func (r *Reconciler) restartPods(ctx context.Context, te *v1alpha1.TokenExchange, cmName string, all, running []*cachedPod,
	prop Propagation, want string) (restarts, time.Duration, error) {
	done, err := r.restartStartedWithoutContent(ctx, te, cmName, running, prop)
	if err != nil || !r.RestartStartedWithoutContent {
		return done, 0, err
	}
	held := heldPods(all, cmName)
	if len(held) == 0 {
		r.Pods.Forget(heldKey(client.ObjectKeyFromObject(te)))
		return done, 0, nil
	}
	heldDone, err := r.restartStartedWithoutContent(ctx, te, cmName, held, r.Pods.Probe(ctx, heldKey(client.ObjectKeyFromObject(te)), held, want))
	for p, what := range heldDone.evicted {
		done.evicted[p] = what
	}
	for p, why := range heldDone.blocked {
		done.blocked[p] = why
	}
	// A held pod's roles may not have the content yet (the kubelet's refresh): nothing else wakes
	// the reconciler when they get it.
	return done, unreachableRetry, err
}

// restarts is what restartStartedWithoutContent did: pod name → what was said of it.
type restarts struct {
	evicted, blocked map[string]string
}

// restartStartedWithoutContent evicts the pods of prop that started before ConfigMap cmName
// existed (see above).
func (r *Reconciler) restartStartedWithoutContent(ctx context.Context, te *v1alpha1.TokenExchange, cmName string,
	pods []*cachedPod, prop Propagation) (restarts, error) {
	done := restarts{evicted: map[string]string{}, blocked: map[string]string{}}
	if !r.RestartStartedWithoutContent || len(prop.StartedWithoutContent) == 0 {
		return done, nil
	}
	var cm corev1.ConfigMap
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: te.Namespace, Name: cmName}, &cm); err != nil {
		return done, client.IgnoreNotFound(err)
	}
	window := r.RestartWindow
	if window == 0 {
		window = DefaultRestartWindow
	}
	notBefore := te.CreationTimestamp.Add(-window)
	for _, pod := range pods {
		if !prop.StartedWithoutContent[pod.Name] || pod.DeletionTimestamp != nil || pod.started.IsZero() ||
			pod.controller == nil || !restartableControllers[pod.controller.Kind] ||
			pod.started.Before(notBefore) || pod.started.After(cm.CreationTimestamp.Time) {
			continue
		}
		eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}}
		target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID}}
		err := r.Client.SubResource("eviction").Create(ctx, target, eviction)
		switch {
		case err == nil:
			what := fmt.Sprintf("%s %s starts it again with %s", pod.controller.Kind, pod.controller.Name,
				strings.Join(prop.PendingRestart[pod.Name], ", "))
			done.evicted[pod.Name] = what
			// The pod is the Event's related object: one Event per pod, not a series of the first.
			r.Recorder.Eventf(te, target, corev1.EventTypeNormal, "PodRestarted", "Evict",
				"pod %s started before ConfigMap %s existed and ran the injector's defaults of its startup settings: evicted; %s",
				pod.Name, cmName, what)
		case apierrors.IsTooManyRequests(err):
			done.blocked[pod.Name] = "a PodDisruptionBudget allows no eviction now"
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone already, or replaced under the same name.
		default:
			return done, fmt.Errorf("evicting pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	return done, nil
}

// setRestarts records in the status the restarts done and held back; it returns how soon to
// look again.
func (st status) setRestarts(done restarts, cmName string) time.Duration {
	if len(done.evicted) == 0 && len(done.blocked) == 0 {
		return 0
	}
	all := map[string]string{}
	for p, what := range done.evicted {
		all[p] = "evicted: " + what
	}
	for p, why := range done.blocked {
		all[p] = "not evicted yet: " + why
	}
	names := make([]string, 0, len(all))
	for p := range all {
		names = append(names, p)
	}
	sort.Strings(names)
	st.set(v1alpha1.ConditionStartupSettingsCurrent, false, v1alpha1.ReasonRestarting,
		fmt.Sprintf("%s started before ConfigMap %s existed and run the injector's defaults of settings that take effect only when a pod starts; restarting them",
			describe(all), cmName))
	if len(done.blocked) > 0 {
		return unreachableRetry
	}
	return propagatingRetry
}
