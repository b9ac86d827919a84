package hub

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
)

// LeaderLabel puts v1alpha1.LabelFederationLeader on the leader's own pod once its endpoint
// serves, after taking it off any other pod of the namespace (a previous leader whose process
// lost the lease keeps its pod, and its labels, when its container restarts), and takes it off
// again when the leader stops. The federation Service selects the label: members reach the
// leader, never a follower that would refuse them.
type LeaderLabel struct {
	// Client patches and lists pods (the API server's, not a cache: the label is read nowhere else).
	Client         client.Client
	Namespace, Pod string
	// Store says when the endpoint serves.
	Store *Store
	Log   logr.Logger
	// Poll is how often the endpoint's start is checked (100 ms when 0).
	Poll time.Duration
}

// NeedLeaderElection: only the leader labels its pod.
func (l *LeaderLabel) NeedLeaderElection() bool { return true }

// Start labels the pod once the endpoint serves, and unlabels it when ctx ends.
func (l *LeaderLabel) Start(ctx context.Context) error {
	poll := l.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	if err := wait.PollUntilContextCancel(ctx, poll, true, func(context.Context) (bool, error) { return l.Store.Serving(), nil }); err != nil {
		return nil // stopped before serving
	}
	// Retried until it holds: a member keeps reconnecting meanwhile, and nothing else is lost.
	if err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: time.Second, Factor: 2, Cap: time.Minute, Steps: 1 << 30}, func(ctx context.Context) (bool, error) {
		err := l.label(ctx)
		if apierrors.IsNotFound(err) {
			// Not running in that pod (outside a cluster, or a renamed hostname): nothing to label.
			l.Log.Info("this hub leader's pod does not exist; its pod is not labelled (set POD_NAME)", "pod", l.Namespace+"/"+l.Pod)
			return true, errNoPod
		}
		if err != nil {
			l.Log.Error(err, "cannot label the federation leader's pod; members reach the leader only by retrying", "pod", l.Namespace+"/"+l.Pod, "label", v1alpha1.LabelFederationLeader)
			return false, nil
		}
		l.Log.Info("labelled the federation leader's pod", "pod", l.Namespace+"/"+l.Pod, "label", v1alpha1.LabelFederationLeader)
		return true, nil
	}); errors.Is(err, errNoPod) {
		return nil
	}
	<-ctx.Done()
	// The process is stopping: leave the Service quickly (the pod may outlive the process).
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := l.patch(stop, l.Pod, false); err != nil {
		l.Log.Error(err, "cannot remove the federation leader label from this pod", "pod", l.Namespace+"/"+l.Pod)
	}
	return nil
}

// errNoPod ends the retries: the pod to label does not exist.
var errNoPod = errors.New("no such pod")

// label takes the label off every other pod, then puts it on this one.
func (l *LeaderLabel) label(ctx context.Context) error {
	var pods corev1.PodList
	if err := l.Client.List(ctx, &pods, client.InNamespace(l.Namespace), client.MatchingLabels{v1alpha1.LabelFederationLeader: "true"}); err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.Name != l.Pod {
			if err := client.IgnoreNotFound(l.patch(ctx, p.Name, false)); err != nil {
				return err
			}
			l.Log.Info("took the federation leader label off a previous leader's pod", "pod", l.Namespace+"/"+p.Name)
		}
	}
	return l.patch(ctx, l.Pod, true)
}

// patch sets (on) or removes the label of pod with a JSON merge patch.
func (l *LeaderLabel) patch(ctx context.Context, pod string, on bool) error {
	var value any // null removes the label
	if on {
		value = "true"
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{v1alpha1.LabelFederationLeader: value}}})
	if err != nil {
		return err
	}
	return l.Client.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: pod}}, client.RawPatch(types.MergePatchType, body))
}
