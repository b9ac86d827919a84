package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// verifiedPods is the controller's memory of its own verdicts: the pods it labelled
// kagenti.io/signature-verified=true, and for which AgentCard. The label on a pod means nothing
// else: the LabelGuard sets it to false on any pod carrying true that is not in here.
type verifiedPods struct {
	mu   sync.Mutex
	pods map[types.NamespacedName]verifiedPod
	// synced are the AgentCards reconciled at least once by this process (see LabelGuard).
	synced map[types.NamespacedName]bool
}

type verifiedPod struct {
	uid  types.UID
	card types.NamespacedName
}

func newVerifiedPods() *verifiedPods {
	return &verifiedPods{pods: map[types.NamespacedName]verifiedPod{}, synced: map[types.NamespacedName]bool{}}
}

func (v *verifiedPods) grant(p *pod, card types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pods[p.key()] = verifiedPod{uid: p.UID, card: card}
}

func (v *verifiedPods) revoke(pod types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.pods, pod)
}

func (v *verifiedPods) has(pod types.NamespacedName, uid types.UID) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.pods[pod]
	return ok && e.uid == uid
}

// grantedBy returns the pods card labelled true.
func (v *verifiedPods) grantedBy(card types.NamespacedName) []types.NamespacedName {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []types.NamespacedName
	for k, e := range v.pods {
		if e.card == card {
			out = append(out, k)
		}
	}
	return out
}

func (v *verifiedPods) markSynced(card types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.synced[card] = true
}

func (v *verifiedPods) forgetCard(card types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.synced, card)
}

// allSynced reports whether every one of cards has been reconciled since the process started.
func (v *verifiedPods) allSynced(cards []v1alpha1.AgentCard) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := range cards {
		if !v.synced[client.ObjectKeyFromObject(&cards[i])] {
			return false
		}
	}
	return true
}

// labelChange is a pod whose label a sync sets to value ("" removes it).
type labelChange struct {
	pod   *pod
	value string
}

// revokeLabels takes true away from every served pod whose verdict is not positive and that may
// carry it, setting the value its card calls for (false, or no label when the card has nothing to
// verify), and sets false on every pod this card verified before that it no longer selects. It
// runs before the status write, so a status the API server refuses cannot leave a pod labelled
// verified. It returns the other served pods whose label differs from what their card calls for,
// for relabel.
func (r *CardReconciler) revokeLabels(ctx context.Context, card types.NamespacedName, served []servedPod, selected map[string]bool, requireSig bool) []labelChange {
	var revoke, relabel []labelChange
	for _, sp := range served {
		want := sp.state.label(requireSig)
		switch {
		case want == labelTrue:
		case r.mayCarryTrue(sp.pod):
			revoke = append(revoke, labelChange{pod: sp.pod, value: want.revokedValue()})
		default:
			// Forgets a verdict given to an earlier pod of the same name (another UID).
			r.Verified.revoke(sp.pod.key())
			if v, ok := want.value(); ok && !hasLabelValue(sp.pod, v) {
				relabel = append(relabel, labelChange{pod: sp.pod, value: v})
			}
		}
	}
	inParallel(revoke, func(lc labelChange) {
		r.Verified.revoke(lc.pod.key())
		// Sent whatever the cache shows: our own true may not be in it yet.
		if err := r.patchVerifiedLabel(ctx, lc.pod, lc.value); err != nil {
			log.FromContext(ctx).Error(err, "labelling pod", "pod", lc.pod.Name)
		}
	})
	for _, key := range r.Verified.grantedBy(card) {
		if !selected[key.Name] {
			r.revokePod(ctx, key)
		}
	}
	return relabel
}

// mayCarryTrue says whether a pod may be labelled true: it is in the cache, or this process
// granted it (the cache may not show our own patch yet).
func (r *CardReconciler) mayCarryTrue(p *pod) bool {
	return p.Labels[v1alpha1.LabelSignatureVerified] == "true" || r.Verified.has(p.key(), p.UID)
}

// relabel sets the label revokeLabels returned: false on a pod whose verification failed, none on
// a pod whose card has nothing to verify. Neither grants anything, so this is no revocation: it
// runs alongside the status write rather than before it, and a sync waits for one API round trip
// instead of two.
func (r *CardReconciler) relabel(ctx context.Context, changes []labelChange) {
	inParallel(changes, func(lc labelChange) {
		if err := r.patchVerifiedLabel(ctx, lc.pod, lc.value); err != nil {
			log.FromContext(ctx).Error(err, "labelling pod", "pod", lc.pod.Name)
		}
	})
}

// grantLabels sets the label to true on every served pod whose verdict is positive, once the
// status saying so is written.
func (r *CardReconciler) grantLabels(ctx context.Context, card types.NamespacedName, served []servedPod) {
	inParallel(served, func(sp servedPod) {
		if !sp.state.verified() {
			return
		}
		// Remembered before the patch: the guard must never see our own label as foreign.
		r.Verified.grant(sp.pod, card)
		if hasLabelValue(sp.pod, "true") {
			return
		}
		if err := r.patchVerifiedLabel(ctx, sp.pod, "true"); err != nil {
			log.FromContext(ctx).Error(err, "labelling pod", "pod", sp.pod.Name)
		}
	})
}

// labelPatchesInFlight bounds the label patches one sync makes at a time.
const labelPatchesInFlight = 8

// inParallel runs f for every item (a pod), at most labelPatchesInFlight at a time, and returns
// when all are done: the order between revoking, writing the status and granting stays as it is,
// the pods of one step are patched together instead of one after the other.
func inParallel[T any](items []T, f func(T)) {
	if len(items) == 0 {
		return
	}
	if len(items) == 1 {
		f(items[0])
		return
	}
	sem := make(chan struct{}, labelPatchesInFlight)
	var wg sync.WaitGroup
	for _, item := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(item)
		}()
	}
	wg.Wait()
}

// revokePod forgets a pod's verdict and sets its label to false if it says true.
func (r *CardReconciler) revokePod(ctx context.Context, key types.NamespacedName) {
	r.Verified.revoke(key)
	p, ok := r.Pods.Get(key)
	if !ok {
		return // gone (or not cached): nothing to correct
	}
	if p.Labels[v1alpha1.LabelSignatureVerified] == "true" {
		if err := r.patchVerifiedLabel(ctx, p, "false"); err != nil {
			log.FromContext(ctx).Error(err, "labelling pod", "pod", key.String())
		}
	}
}

// LabelGuard keeps kagenti.io/signature-verified=true for the pods agentcard verified: any other
// pod seen carrying it (a forged pod template, a hand edit, a label left from a deleted AgentCard)
// gets false and a Warning event. Right after a start, nothing is verified yet: the guard waits
// until every AgentCard of the pod's namespace has been synced once, so a restart does not flip
// verified pods off and on.
type LabelGuard struct {
	Client client.Client
	// Pods are the cached pods, shared with the CardReconciler.
	Pods     *kit.SlimPods[*pod]
	Verified *verifiedPods
	Recorder events.EventRecorder
	// Retry is how soon a pod is looked at again while its namespace's AgentCards are not synced.
	Retry time.Duration
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch;patch

// Reconcile implements reconcile.Reconciler for pods.
func (g *LabelGuard) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p, ok := g.Pods.Get(req.NamespacedName)
	if !ok {
		return ctrl.Result{}, nil // gone
	}
	if p.Labels[v1alpha1.LabelSignatureVerified] != "true" || g.Verified.has(req.NamespacedName, p.UID) {
		return ctrl.Result{}, nil
	}
	var cards v1alpha1.AgentCardList
	if err := g.Client.List(ctx, &cards, client.InNamespace(p.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	if !g.Verified.allSynced(cards.Items) {
		return ctrl.Result{RequeueAfter: g.Retry}, nil
	}
	if g.Verified.has(req.NamespacedName, p.UID) {
		return ctrl.Result{}, nil
	}
	// Optimistic lock (the resourceVersion the guard judged): if a sync labels the pod meanwhile,
	// this patch conflicts and is retried.
	patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"labels":{%q:"false"}}}`, p.ResourceVersion, v1alpha1.LabelSignatureVerified)
	ref := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion}}
	if err := g.Client.Patch(ctx, ref.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if g.Recorder != nil {
		g.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, "UnverifiedLabelReset", "ResetLabel",
			"%s=true was set on this pod, but agentcard did not verify a card for it: set to false", v1alpha1.LabelSignatureVerified)
	}
	log.FromContext(ctx).Info(fmt.Sprintf("reset %s on a pod agentcard did not verify", v1alpha1.LabelSignatureVerified), "pod", req.String())
	return ctrl.Result{}, nil
}
