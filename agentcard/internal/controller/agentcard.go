package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/metrics"
	"github.com/kagenti/platform/agentcard/internal/resources"
	"github.com/kagenti/platform/agentcard/internal/signature"
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

// CardReconciler syncs AgentCards: resolve pods, fetch each one's card, verify, write status.
type CardReconciler struct {
	Client client.Client
	// Pods are the cached pods (kit.SlimPods); agentcard reads pods nowhere else.
	Pods     *kit.SlimPods[*pod]
	Resolver *duck.Resolver
	Fetcher  *fetch.Fetcher
	Trust    *TrustStore
	// Status writes the status through the shared model: only agentcard's conditions, an Event
	// when Ready changes.
	Status *duck.StatusApplier
	// Verified remembers the pods labelled verified (shared with the LabelGuard).
	Verified *verifiedPods
	// Identities says which identities an AgentCard may bind.
	Identities signature.IdentityRules

	// RequireSignature is the default of spec.requireSignature; TrustDomain of identityBinding.trustDomain.
	RequireSignature bool
	TrustDomain      string

	// cards holds the pods' cards between syncs within a byte budget.
	cards *cardStore
	// parsing shares one parse among the pods fetching the same body at once.
	parsing singleflight.Group

	mu        sync.Mutex
	states    map[types.NamespacedName]*cardState
	selectors map[types.NamespacedName]labels.Selector
}

func (r *CardReconciler) stateFor(key types.NamespacedName) *cardState {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.states == nil {
		r.states = map[types.NamespacedName]*cardState{}
	}
	s, ok := r.states[key]
	if !ok {
		s = &cardState{pods: map[string]*podState{}}
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
		s.reset(r.cards)
	}
	r.Verified.forgetCard(key)
	for _, p := range r.Verified.grantedBy(key) {
		r.revokePod(ctx, p)
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
	defer r.Verified.markSynced(req.NamespacedName)
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
	defer r.stateFor(req.NamespacedName).releaseTransient()

	relabel := r.revokeLabels(ctx, req.NamespacedName, served, selected, requireSig)
	desired := resources.BuildStatus(&c, results(served), selErr, requireSig, time.Now())
	var labelling sync.WaitGroup
	labelling.Go(func() { r.relabel(ctx, relabel) })
	err = r.applyStatus(ctx, &c, desired)
	labelling.Wait()
	if err != nil {
		return ctrl.Result{}, r.failClosed(ctx, &c, desired, err)
	}
	r.grantLabels(ctx, req.NamespacedName, served)
	priority := periodicSyncPriority
	next := jitter(period)
	if retry, ok := r.stateFor(req.NamespacedName).nextRetry(fetchFailed(served), period); ok {
		next = retry
	}
	return ctrl.Result{RequeueAfter: next, Priority: &priority}, nil
}

// firstFetchRetry and maxFetchRetries bound the quick retries of a failed fetch: 1 s, 2 s, 4 s,
// 8 s, each at most a quarter of the sync period, then the sync period. A pod whose card server
// was not up yet when it became ready (or that failed once) gets its card seconds after it
// answers instead of a whole period later; one that keeps failing costs a few fetches more, not a
// fetch a second.
const (
	firstFetchRetry = time.Second
	maxFetchRetries = 4
)

// fetchFailed says whether a sync reported a fetch failure a retry may cure: no answer, a refused
// connection, an HTTP error. An invalid or too large card, and a miss absorbed by
// failureThreshold (the pod keeps its card), wait for the next sync.
func fetchFailed(served []servedPod) bool {
	for _, sp := range served {
		if sp.state.fetchStatus == v1alpha1.FetchFailed && sp.state.reason == v1alpha1.ReasonFetchFailed {
			return true
		}
	}
	return false
}

// nextRetry returns the delay of the next quick retry after a sync whose fetches failed (or
// false: none, after a sync without failure or once the retries are spent). A sync without a
// failure starts the count again.
func (cs *cardState) nextRetry(failed bool, period time.Duration) (time.Duration, bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !failed {
		cs.retries = 0
		return 0, false
	}
	if cs.retries >= maxFetchRetries {
		return 0, false
	}
	d := firstFetchRetry << cs.retries
	if d > period/4 {
		return 0, false
	}
	cs.retries++
	return d, true
}

// periodicSyncPriority is the queue priority of the periodic re-sync: below every event, including
// the initial list's (handler.LowPriority), so that at start-up and under churn the first sync of
// a card and a change to it are not queued behind re-syncs that most often find nothing new.
const periodicSyncPriority = handler.LowPriority - 1

// syncSelected resolves the card's pods and syncs the serving ones. It returns their results, the
// names of every selected pod (serving or not), and the selector problem a user must fix, if any.
func (r *CardReconciler) syncSelected(ctx context.Context, c *v1alpha1.AgentCard, requireSig bool) ([]servedPod, map[string]bool, *resources.SelectorError, error) {
	key := client.ObjectKeyFromObject(c)
	sel, err := r.podSelector(ctx, c)
	var selErr *resources.SelectorError
	if errors.As(err, &selErr) {
		r.rememberSelector(key, nil)
		r.stateFor(key).reset(r.cards)
		return nil, nil, selErr, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	r.rememberSelector(key, sel)
	pods, err := r.selectedPods(c.Namespace, sel)
	if err != nil {
		return nil, nil, nil, err
	}
	selected := make(map[string]bool, len(pods))
	var serving []*pod
	for _, p := range pods {
		selected[p.Name] = true
		if p.Serving {
			serving = append(serving, p)
		}
	}
	return r.syncPods(ctx, c, serving, requireSig), selected, nil, nil
}

// syncPods fetches every ready pod in parallel (the fetcher bounds global concurrency) and drops
// the state of pods that are gone.
func (r *CardReconciler) syncPods(ctx context.Context, c *v1alpha1.AgentCard, pods []*pod, requireSig bool) []servedPod {
	cs := r.stateFor(client.ObjectKeyFromObject(c))
	cs.mu.Lock()
	defer cs.mu.Unlock()
	td, spiffeID := r.TrustDomain, ""
	if b := c.Spec.IdentityBinding; b != nil {
		if b.TrustDomain != "" {
			td = b.TrustDomain
		}
		spiffeID = b.SpiffeID
	}
	keep := make(map[string]bool, len(pods))
	out := make([]servedPod, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		keep[p.Name] = true
		st, ok := cs.pods[p.Name]
		if !ok {
			st = &podState{}
			cs.pods[p.Name] = st
		}
		out[i] = servedPod{pod: p, state: st}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.syncPod(ctx, st, syncInput{card: c, pod: p, trustDomain: td, requireSig: requireSig, expectedIDSpec: spiffeID})
		}()
	}
	wg.Wait()
	for name, st := range cs.pods {
		if !keep[name] {
			r.dropCard(st)
			delete(cs.pods, name)
		}
	}
	return out
}

// reset forgets every pod, releasing their cards from store.
func (cs *cardState) reset(store *cardStore) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, st := range cs.pods {
		if st.card != nil {
			store.release(st.card.heldKey)
		}
	}
	cs.pods = map[string]*podState{}
}

// releaseTransient drops the card bytes of this sync that the store does not hold.
func (cs *cardState) releaseTransient() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, st := range cs.pods {
		st.releaseTransient()
	}
}

// applyStatus writes desired with server-side apply, only when it differs from the stored status
// (statusEqual: timestamps that only move with something else, and the card body, whose hash is
// compared, do not count). lastSyncTime says when it was written.
func (r *CardReconciler) applyStatus(ctx context.Context, c *v1alpha1.AgentCard, desired v1alpha1.AgentCardStatus) error {
	if resources.StatusEqual(c.Status, desired) {
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
	if !resources.IsVerified(c.Status) || resources.IsVerified(desired) {
		return writeErr
	}
	if err := r.Status.Apply(ctx, c, withStatus(c, resources.FailClosedStatus(c, desired, writeErr))); err != nil {
		return errors.Join(writeErr, fmt.Errorf("withdrawing the previous verdict: %w", err))
	}
	metrics.ObserveStatusWrite("withdrawn")
	return writeErr
}

// jitter spreads requeues over ±10% of the period so 1,000 cards do not sync in lockstep.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}
