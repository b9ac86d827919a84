// Package podlabels writes the kagenti.io/signature-verified label on the pods of verified
// AgentCards (the pods themselves, never a template: no restart), in the order that is the
// security property (revoke before the status write, grant after it), remembers the verdicts it
// gave (Grants), and guards the label against anyone else (LabelGuard).
package podlabels

import (
	"context"
	"fmt"
	"strconv"
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
	"github.com/kagenti/platform/agentcard/internal/podcache"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// Grants is the controller's memory of its own verdicts: the pods it labelled
// kagenti.io/signature-verified=true, and for which AgentCard. The label on a pod means nothing
// else: the LabelGuard sets it to false on any pod carrying true that is not in here.
type Grants struct {
	mu   sync.Mutex
	pods map[types.NamespacedName]verifiedPod
	// synced are the AgentCards reconciled at least once by this process (see LabelGuard).
	synced map[types.NamespacedName]bool
}

type verifiedPod struct {
	uid  types.UID
	card types.NamespacedName
}

// NewGrants returns an empty memory.
func NewGrants() *Grants {
	return &Grants{pods: map[types.NamespacedName]verifiedPod{}, synced: map[types.NamespacedName]bool{}}
}

func (v *Grants) grant(p *podcache.Pod, card types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pods[p.Key()] = verifiedPod{uid: p.UID, card: card}
}

func (v *Grants) revoke(pod types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.pods, pod)
}

func (v *Grants) has(pod types.NamespacedName, uid types.UID) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.pods[pod]
	return ok && e.uid == uid
}

// GrantedBy returns the pods card labelled true.
func (v *Grants) GrantedBy(card types.NamespacedName) []types.NamespacedName {
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

// MarkSynced records that card was reconciled (the LabelGuard waits for every card of a namespace).
func (v *Grants) MarkSynced(card types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.synced[card] = true
}

// ForgetCard forgets that a deleted card was reconciled.
func (v *Grants) ForgetCard(card types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.synced, card)
}

// allSynced reports whether every one of cards has been reconciled since the process started.
func (v *Grants) allSynced(cards []v1alpha1.AgentCard) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := range cards {
		if !v.synced[client.ObjectKeyFromObject(&cards[i])] {
			return false
		}
	}
	return true
}

// Labeller writes the label on the pods of one AgentCard's syncs and keeps Granted current.
type Labeller struct {
	Client client.Client
	// Pods are the cached pods (shared with the sync and the LabelGuard).
	Pods *kit.SlimPods[*podcache.Pod]
	// Granted remembers the pods labelled true (shared with the LabelGuard).
	Granted *Grants
}

// Decision is what a sync calls for on one served pod's label.
type Decision struct {
	Pod  *podcache.Pod
	Want Label
}

// Change is a pod whose label a sync sets to Value ("" removes it).
type Change struct {
	Pod   *podcache.Pod
	Value string
}

// Revoke takes true away from every served pod whose verdict is not positive and that may carry
// it, setting the value its card calls for (false, or no label when the card has nothing to
// verify), and sets false on every pod card verified before that it no longer selects (selected
// names every pod it selects, serving or not). It runs before the status write, so a status the
// API server refuses cannot leave a pod labelled verified. It returns the other served pods whose
// label differs from what their card calls for, for Relabel.
func (l *Labeller) Revoke(ctx context.Context, card types.NamespacedName, served []Decision, selected map[string]bool) []Change {
	var revoke, relabel []Change
	for _, d := range served {
		switch {
		case d.Want == LabelTrue:
		case l.mayCarryTrue(d.Pod):
			revoke = append(revoke, Change{Pod: d.Pod, Value: d.Want.revokedValue()})
		default:
			// Forgets a verdict given to an earlier pod of the same name (another UID).
			l.Granted.revoke(d.Pod.Key())
			if v, ok := d.Want.value(); ok && !hasLabelValue(d.Pod, v) {
				relabel = append(relabel, Change{Pod: d.Pod, Value: v})
			}
		}
	}
	inParallel(revoke, func(lc Change) {
		l.Granted.revoke(lc.Pod.Key())
		// Sent whatever the cache shows: our own true may not be in it yet.
		if err := l.patch(ctx, lc.Pod, lc.Value); err != nil {
			log.FromContext(ctx).Error(err, "labelling pod", "pod", lc.Pod.Name)
		}
	})
	for _, key := range l.Granted.GrantedBy(card) {
		if !selected[key.Name] {
			l.RevokePod(ctx, key)
		}
	}
	return relabel
}

// mayCarryTrue says whether a pod may be labelled true: it is in the cache, or this process
// granted it (the cache may not show our own patch yet).
func (l *Labeller) mayCarryTrue(p *podcache.Pod) bool {
	return p.Labels[v1alpha1.LabelSignatureVerified] == "true" || l.Granted.has(p.Key(), p.UID)
}

// Relabel sets the labels Revoke returned: false on a pod whose verification failed, none on a
// pod whose card has nothing to verify. Neither grants anything, so this is no revocation: it
// runs alongside the status write rather than before it, and a sync waits for one API round trip
// instead of two.
func (l *Labeller) Relabel(ctx context.Context, changes []Change) {
	inParallel(changes, func(lc Change) {
		if err := l.patch(ctx, lc.Pod, lc.Value); err != nil {
			log.FromContext(ctx).Error(err, "labelling pod", "pod", lc.Pod.Name)
		}
	})
}

// Grant sets the label to true on every served pod whose verdict is positive, once the status
// saying so is written.
func (l *Labeller) Grant(ctx context.Context, card types.NamespacedName, served []Decision) {
	inParallel(served, func(d Decision) {
		if d.Want != LabelTrue {
			return
		}
		// Remembered before the patch: the guard must never see our own label as foreign.
		l.Granted.grant(d.Pod, card)
		if hasLabelValue(d.Pod, "true") {
			return
		}
		if err := l.patch(ctx, d.Pod, "true"); err != nil {
			log.FromContext(ctx).Error(err, "labelling pod", "pod", d.Pod.Name)
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

// RevokePod forgets a pod's verdict and sets its label to false if it says true.
func (l *Labeller) RevokePod(ctx context.Context, key types.NamespacedName) {
	l.Granted.revoke(key)
	p, ok := l.Pods.Get(key)
	if !ok {
		return // gone (or not cached): nothing to correct
	}
	if p.Labels[v1alpha1.LabelSignatureVerified] == "true" {
		if err := l.patch(ctx, p, "false"); err != nil {
			log.FromContext(ctx).Error(err, "labelling pod", "pod", key.String())
		}
	}
}

// patch sets kagenti.io/signature-verified on the pod itself to value, or removes it when value
// is "" (a metadata-only merge patch: no restart, never the workload's template).
func (l *Labeller) patch(ctx context.Context, p *podcache.Pod, value string) error {
	v := "null"
	if value != "" {
		v = strconv.Quote(value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, v1alpha1.LabelSignatureVerified, v)
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	err := l.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, []byte(patch)))
	return client.IgnoreNotFound(err)
}

// hasLabelValue says whether the cached pod's kagenti.io/signature-verified is value ("": absent).
func hasLabelValue(p *podcache.Pod, value string) bool {
	v, ok := p.Labels[v1alpha1.LabelSignatureVerified]
	if value == "" {
		return !ok
	}
	return ok && v == value
}

// LabelGuard keeps kagenti.io/signature-verified=true for the pods agentcard verified: any other
// pod seen carrying it (a forged pod template, a hand edit, a label left from a deleted AgentCard)
// gets false and a Warning event. Right after a start, nothing is verified yet: the guard waits
// until every AgentCard of the pod's namespace has been synced once, so a restart does not flip
// verified pods off and on.
type LabelGuard struct {
	Client client.Client
	// Pods are the cached pods, shared with the CardReconciler.
	Pods     *kit.SlimPods[*podcache.Pod]
	Verified *Grants
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
