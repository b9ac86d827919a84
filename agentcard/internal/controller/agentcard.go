package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/cardsync"
	"github.com/kagenti/platform/agentcard/internal/metrics"
	"github.com/kagenti/platform/agentcard/internal/podcache"
	"github.com/kagenti/platform/agentcard/internal/podlabels"
	"github.com/kagenti/platform/agentcard/internal/status"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// FieldManager is the server-side apply field manager of everything this binary writes.
const FieldManager = "kagenti-agentcard"

// DefaultSyncPeriod applies when spec.syncPeriod is unset.
const DefaultSyncPeriod = 30 * time.Second

// +kubebuilder:rbac:groups=kagenti.io,resources=agentcards,verbs=get;list;watch
// +kubebuilder:rbac:groups=kagenti.io,resources=agentcards/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch;patch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets;replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs;cronjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// CardReconciler syncs AgentCards: resolve the pods, sync each one's card (cardsync), revoke the
// labels of pods whose verdict is not positive (podlabels), write the status (status), grant the
// label to pods whose verdict is.
type CardReconciler struct {
	Client client.Client
	// Pods are the cached pods (kit.SlimPods); agentcard reads pods nowhere else.
	Pods     *kit.SlimPods[*podcache.Pod]
	Resolver *duck.Resolver
	// Cards fetches, keeps and verifies the pods' cards.
	Cards *cardsync.Syncer
	// Status writes the status through the shared model: only agentcard's conditions, an Event
	// when Ready changes.
	Status *duck.StatusApplier
	// Labels writes the pods' verified label; its Granted is shared with the LabelGuard.
	Labels *podlabels.Labeller

	// RequireSignature is the default of spec.requireSignature.
	RequireSignature bool

	mu        sync.Mutex
	states    map[types.NamespacedName]*cardsync.CardPods
	selectors map[types.NamespacedName]labels.Selector
}

func (r *CardReconciler) stateFor(key types.NamespacedName) *cardsync.CardPods {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.states == nil {
		r.states = map[types.NamespacedName]*cardsync.CardPods{}
	}
	s, ok := r.states[key]
	if !ok {
		s = cardsync.NewCardPods()
		r.states[key] = s
	}
	return s
}

// forget drops a deleted AgentCard: its pods' cards, its selector, and the verdicts it gave.
func (r *CardReconciler) forget(ctx context.Context, key types.NamespacedName) {
	r.mu.Lock()
	s := r.states[key]
	delete(r.states, key)
	delete(r.selectors, key)
	r.mu.Unlock()
	if s != nil {
		r.Cards.Reset(s)
	}
	r.Labels.Granted.ForgetCard(key)
	for _, p := range r.Labels.Granted.GrantedBy(key) {
		r.Labels.RevokePod(ctx, p)
	}
}

func (r *CardReconciler) rememberSelector(key types.NamespacedName, sel labels.Selector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.selectors == nil {
		r.selectors = map[types.NamespacedName]labels.Selector{}
	}
	if sel == nil {
		delete(r.selectors, key)
		return
	}
	r.selectors[key] = sel
}

// cardsSelecting returns the AgentCards whose last resolved selector matches a pod's labels.
func (r *CardReconciler) cardsSelecting(namespace string, podLabels map[string]string) []types.NamespacedName {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []types.NamespacedName
	for k, sel := range r.selectors {
		if k.Namespace == namespace && sel.Matches(labels.Set(podLabels)) {
			out = append(out, k)
		}
	}
	return out
}

// Reconcile implements reconcile.Reconciler.
//
// The order is the security property: pods whose verdict is not positive and that may carry true
// lose it first (false, or no label when their card has nothing to verify), then the status is
// written (while the other pods get the label their card calls for: no revocation, see relabel),
// then pods whose verdict is positive are labelled true. A status the API server refuses never
// leaves a pod labelled verified, nor (see failClosed) an AgentCard saying Verified for a card that
// no longer is.
func (r *CardReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var c v1alpha1.AgentCard
	if err := r.Client.Get(ctx, req.NamespacedName, &c); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer r.Labels.Granted.MarkSynced(req.NamespacedName)
	if !c.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	period := DefaultSyncPeriod
	if c.Spec.SyncPeriod != nil && c.Spec.SyncPeriod.Duration >= 5*time.Second {
		period = c.Spec.SyncPeriod.Duration
	}
	requireSig := r.RequireSignature
	if c.Spec.RequireSignature != nil {
		requireSig = *c.Spec.RequireSignature
	}

	served, selected, selErr, err := r.syncSelected(ctx, &c, requireSig)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer r.stateFor(req.NamespacedName).ReleaseTransient()

	decisions := labelDecisions(served, requireSig)
	relabel := r.Labels.Revoke(ctx, req.NamespacedName, decisions, selected)
	desired := status.Build(&c, cardsync.Results(served), selErr, requireSig, time.Now())
	var labelling sync.WaitGroup
	labelling.Go(func() { r.Labels.Relabel(ctx, relabel) })
	err = r.applyStatus(ctx, &c, desired)
	labelling.Wait()
	if err != nil {
		return ctrl.Result{}, r.failClosed(ctx, &c, desired, err)
	}
	r.Labels.Grant(ctx, req.NamespacedName, decisions)
	priority := periodicSyncPriority
	next := jitter(period)
	if retry, ok := r.stateFor(req.NamespacedName).NextRetry(cardsync.FetchFailed(served), period); ok {
		next = retry
	}
	return ctrl.Result{RequeueAfter: next, Priority: &priority}, nil
}

// labelDecisions are what the sync calls for on each served pod's label.
func labelDecisions(served []cardsync.Served, requireSig bool) []podlabels.Decision {
	out := make([]podlabels.Decision, len(served))
	for i, sp := range served {
		out[i] = podlabels.Decision{Pod: sp.Pod, Want: podlabels.Want(sp.State.HasCard(), sp.State.Verdict(), requireSig)}
	}
	return out
}

// periodicSyncPriority is the queue priority of the periodic re-sync: below every event, including
// the initial list's (handler.LowPriority), so that at start-up and under churn the first sync of
// a card and a change to it are not queued behind re-syncs that most often find nothing new.
const periodicSyncPriority = handler.LowPriority - 1

// syncSelected resolves the card's pods and syncs the serving ones. It returns their results, the
// names of every selected pod (serving or not), and the selector problem a user must fix, if any.
func (r *CardReconciler) syncSelected(ctx context.Context, c *v1alpha1.AgentCard, requireSig bool) ([]cardsync.Served, map[string]bool, *status.SelectorError, error) {
	key := client.ObjectKeyFromObject(c)
	sel, err := r.podSelector(ctx, c)
	var selErr *status.SelectorError
	if errors.As(err, &selErr) {
		r.rememberSelector(key, nil)
		r.Cards.Reset(r.stateFor(key))
		return nil, nil, selErr, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	r.rememberSelector(key, sel)
	// Only the serving pods are fetched; the others keep a verdict given while they served (same
	// pod, same IP), so a readiness blip does not take the label away. The pods are the cache's
	// own: read-only, their labels above all.
	pods, err := podcache.Selected(r.Pods, c.Namespace, sel)
	if err != nil {
		return nil, nil, nil, err
	}
	selected := make(map[string]bool, len(pods))
	var serving []*podcache.Pod
	for _, p := range pods {
		selected[p.Name] = true
		if p.Serving {
			serving = append(serving, p)
		}
	}
	return r.Cards.Sync(ctx, c, r.stateFor(key), serving, requireSig), selected, nil, nil
}

// applyStatus writes desired with server-side apply, only when it differs from the stored status
// (statusEqual: timestamps that only move with something else, and the card body, whose hash is
// compared, do not count). lastSyncTime says when it was written.
func (r *CardReconciler) applyStatus(ctx context.Context, c *v1alpha1.AgentCard, desired v1alpha1.AgentCardStatus) error {
	if status.Equal(c.Status, desired) {
		metrics.ObserveStatusWrite("unchanged")
		return nil
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	desired.LastSyncTime = &now
	if err := r.Status.Apply(ctx, c, withStatus(c, desired)); err != nil {
		metrics.ObserveStatusWrite("failed")
		return err
	}
	metrics.ObserveStatusWrite("applied")
	return nil
}

// withStatus is c with st as its status, for the StatusApplier (which reads the name, namespace
// and status): the metadata and spec are shared, not copied.
func withStatus(c *v1alpha1.AgentCard, st v1alpha1.AgentCardStatus) *v1alpha1.AgentCard {
	return &v1alpha1.AgentCard{TypeMeta: c.TypeMeta, ObjectMeta: c.ObjectMeta, Spec: c.Spec, Status: st}
}

// failClosed handles a status write the API server refused. When the stored status says Verified
// and the new one does not, the stored verdict must not stay in force (netpol would keep a
// permissive policy): a minimal status without the card, Verified=False and Ready=False with reason
// StatusWriteFailed (a Warning Event, as every change of Ready), replaces it. The pods were
// labelled false before the write. writeErr is returned either way, so the sync is retried with
// backoff.
func (r *CardReconciler) failClosed(ctx context.Context, c *v1alpha1.AgentCard, desired v1alpha1.AgentCardStatus, writeErr error) error {
	if !status.IsVerified(c.Status) || status.IsVerified(desired) {
		return writeErr
	}
	if err := r.Status.Apply(ctx, c, withStatus(c, status.FailClosed(c, desired, writeErr))); err != nil {
		return errors.Join(writeErr, fmt.Errorf("withdrawing the previous verdict: %w", err))
	}
	metrics.ObserveStatusWrite("withdrawn")
	return writeErr
}

// jitter spreads requeues over ±10% of the period so 1,000 cards do not sync in lockstep.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}
