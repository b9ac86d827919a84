package controller

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kagenti/platform/netpol/api"
	"github.com/kagenti/platform/netpol/internal/resources"
	"github.com/kagenti/platform/netpol/internal/view"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// Modes of operation (--mode).
const (
	ModeEnforce = "enforce"
	ModeAudit   = "audit"
	ModeOff     = "off"
)

// Reconciler keeps one NetworkPolicy per AgentCard in line with the card's verification.
type Reconciler struct {
	// Client reads through the cache, unstructured objects included.
	Client client.Client
	// Policies writes the NetworkPolicies (its APIReader tells a user's policy, invisible to the
	// label-filtered cache, from a cache lag).
	Policies *kit.Applier
	Resolver *duck.Resolver
	Recorder events.EventRecorder
	// Status writes NetworkPolicyReady, and only that, on AgentCards.
	Status *duck.StatusApplier
	Mode   string
	Policy resources.Options

	// written is the NetworkPolicyReady condition last written on each card, with the card's
	// resourceVersion it was computed from (see report).
	written writtenConditions
}

// writtenConditions remembers the condition netpol last wrote on each AgentCard and the card's
// resourceVersion it was computed from. A card is often reconciled again before the cache has the
// status just written (its policy's creation and its workload's events queue it meanwhile); that
// reconcile reads the old status and would write, and record an Event for, the same condition a
// second time. While the cache still shows that resourceVersion, the condition is known written.
type writtenConditions struct {
	mu sync.Mutex
	m  map[types.NamespacedName]writtenCondition
}

// writtenCondition is a card's resourceVersion and a hash of the condition's status, reason and
// message (a few dozen bytes per card, not the message itself).
type writtenCondition struct {
	resourceVersion string
	condition       uint64
}

func newWrittenCondition(u *unstructured.Unstructured, status metav1.ConditionStatus, reason, message string) writtenCondition {
	h := fnv.New64a()
	for _, s := range []string{string(status), reason, message} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	return writtenCondition{resourceVersion: u.GetResourceVersion(), condition: h.Sum64()}
}

// has reports whether c was written from the card's resourceVersion it names. An entry about
// another resourceVersion has served its purpose (the cache shows a newer card: the write, or a
// later change) and is forgotten, so that converged cards cost no entry.
func (w *writtenConditions) has(key types.NamespacedName, c writtenCondition) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, ok := w.m[key]
	if ok && prev.resourceVersion != c.resourceVersion {
		delete(w.m, key)
	}
	return ok && prev == c
}

func (w *writtenConditions) set(key types.NamespacedName, c writtenCondition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[types.NamespacedName]writtenCondition{}
	}
	w.m[key] = c
}

func (w *writtenConditions) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}

// +kubebuilder:rbac:groups=kagenti.io,resources=agentcards,verbs=get;list;watch
// +kubebuilder:rbac:groups=kagenti.io,resources=agentcards/status,verbs=get;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets;replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs;cronjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile gets the card, resolves its pods, renders the policy, applies it and reports.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	u := view.NewAgentCard()
	if err := r.Client.Get(ctx, req.NamespacedName, u); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.forget(req.NamespacedName)
			// The garbage collector would delete the policy through its owner reference; doing it here
			// too makes "card deleted → policy deleted" one reconcile, with or without a GC.
			return ctrl.Result{}, r.deleteOwned(ctx, req.Namespace, req.Name, func(ref metav1.OwnerReference) bool { return ref.Name == req.Name }, nil)
		}
		return ctrl.Result{}, err
	}
	if u.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, nil // the garbage collector (or the NotFound branch) removes the policy
	}
	card, err := view.FromUnstructured(u)
	if err != nil {
		return ctrl.Result{}, r.report(ctx, u, metav1.ConditionFalse, api.ReasonInvalidAgentCard, err.Error())
	}
	if r.Mode == ModeOff {
		if err := r.deleteOwned(ctx, card.Namespace, card.Name, func(ref metav1.OwnerReference) bool { return ref.UID == card.UID }, u); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.clearCondition(ctx, u)
	}

	selector, err := r.podSelector(ctx, card)
	if err != nil {
		if reason := duck.ReasonOf(err); reason != "" {
			return ctrl.Result{}, r.report(ctx, u, metav1.ConditionFalse, reason, err.Error())
		}
		var invalid *invalidSelectorError
		if errors.As(err, &invalid) {
			return ctrl.Result{}, r.report(ctx, u, metav1.ConditionFalse, api.ReasonInvalidSelector, err.Error())
		}
		return ctrl.Result{}, err
	}
	desired := resources.MakeNetworkPolicy(card, selector, r.Policy)
	verdict := card.Verify()

	if r.Mode == ModeAudit {
		state, err := r.auditState(ctx, desired)
		if err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.report(ctx, u, metav1.ConditionFalse, api.ReasonAuditMode,
			fmt.Sprintf("audit mode: would apply %s NetworkPolicy %s (%s); %s", resources.KindFor(verdict), desired.Name, verdict.Reason, state))
	}

	if err := r.apply(ctx, u, card, desired); err != nil {
		var notOwned *kit.NotOwnedError
		if errors.As(err, &notOwned) {
			return ctrl.Result{}, r.report(ctx, u, metav1.ConditionFalse, api.ReasonPolicyConflict,
				notOwned.Error()+", or point this AgentCard elsewhere")
		}
		return ctrl.Result{}, fmt.Errorf("applying NetworkPolicy %s: %w", desired.Name, err)
	}
	// A card whose target changed leaves its old policy behind: remove every other policy it controls.
	if err := r.deleteOwned(ctx, card.Namespace, card.Name, func(ref metav1.OwnerReference) bool { return ref.UID == card.UID }, u, desired.Name); err != nil {
		return ctrl.Result{}, err
	}
	reason := api.ReasonRestrictive
	if verdict.Verified {
		reason = api.ReasonPermissive
	}
	return ctrl.Result{}, r.report(ctx, u, metav1.ConditionTrue, reason,
		fmt.Sprintf("NetworkPolicy %s is %s: %s", desired.Name, resources.KindFor(verdict), verdict.Reason))
}

type invalidSelectorError struct{ msg string }

func (e *invalidSelectorError) Error() string { return e.msg }

// podSelector selects the card's pods: the workload's pod selector in targetRef mode, spec.selector otherwise.
func (r *Reconciler) podSelector(ctx context.Context, card *view.AgentCard) (metav1.LabelSelector, error) {
	if card.TargetRef == nil {
		if card.Selector == nil {
			return metav1.LabelSelector{}, &invalidSelectorError{"spec: neither targetRef nor selector is set"}
		}
		if resources.IsEmptySelector(*card.Selector) {
			return metav1.LabelSelector{}, &invalidSelectorError{"spec.selector is empty and would select every pod of the namespace; refusing to write a NetworkPolicy for it"}
		}
		if _, err := metav1.LabelSelectorAsSelector(card.Selector); err != nil {
			return metav1.LabelSelector{}, &invalidSelectorError{fmt.Sprintf("spec.selector: %v", err)}
		}
		return *card.Selector, nil
	}
	w, err := r.Resolver.Resolve(ctx, card.Namespace, *card.TargetRef)
	if err != nil {
		return metav1.LabelSelector{}, err
	}
	return resources.WorkloadPodSelector(w)
}

// apply writes the desired policy through kit.ApplyObject, the one apply-if-changed every
// pillar uses for the objects it derives: nothing is written when the stored policy matches, and a
// policy of that name that this card does not control is left alone with a *kit.NotOwnedError.
//
// A created policy is an Event only when the card had already been reported on (it has a
// NetworkPolicyReady condition: its target changed, the policy was deleted, the workload appeared):
// a card's first policy is reported by the condition written in the same reconcile, so a thousand
// cards getting their policies at start-up record no thousand Events (a third of the first sync's
// API writes, and of the memory the event broadcaster holds for six to twelve minutes).
func (r *Reconciler) apply(ctx context.Context, u *unstructured.Unstructured, card *view.AgentCard, desired *networkingv1.NetworkPolicy) error {
	result, err := kit.ApplyObject(ctx, r.Policies, desired, u, policyContent)
	if err != nil {
		return err
	}
	switch result {
	case kit.Created:
		if card.Condition(api.ConditionNetworkPolicyReady) == nil {
			return nil
		}
		r.Recorder.Eventf(u, desired, corev1.EventTypeNormal, "PolicyCreated", "Create",
			"created %s NetworkPolicy %s", desired.Annotations[resources.PolicyKindAnnotation], desired.Name)
	case kit.Updated:
		r.Recorder.Eventf(u, desired, corev1.EventTypeNormal, "PolicyUpdated", "Update",
			"updated NetworkPolicy %s to %s", desired.Name, desired.Annotations[resources.PolicyKindAnnotation])
	}
	return nil
}

// auditState says how the cluster differs from what enforce mode would write.
func (r *Reconciler) auditState(ctx context.Context, desired *networkingv1.NetworkPolicy) (string, error) {
	existing := &networkingv1.NetworkPolicy{}
	switch err := r.Client.Get(ctx, client.ObjectKeyFromObject(desired), existing); {
	case apierrors.IsNotFound(err):
		return "no such policy exists, nothing was written", nil
	case err != nil:
		return "", err
	case policyContent.UpToDate(existing, desired) &&
		existing.Annotations[resources.PolicyKindAnnotation] == desired.Annotations[resources.PolicyKindAnnotation]:
		return "the existing policy already matches, nothing was written", nil
	}
	return "the existing policy differs and was left unchanged", nil
}

// deleteOwned deletes the netpol-managed policies in namespace controlled by the AgentCard named
// cardName for which match holds, except those named in keep. card (may be nil) receives the
// events. The policies are looked up by their controlling card (policyCardIndex), so a reconcile
// reads its own policies, not every policy of the namespace: listing them all made a first sync of
// n cards in one namespace cost n² policy copies.
func (r *Reconciler) deleteOwned(ctx context.Context, namespace, cardName string, match func(metav1.OwnerReference) bool, card *unstructured.Unstructured, keep ...string) error {
	var list networkingv1.NetworkPolicyList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{policyCardIndex: cardName},
		client.MatchingLabels{contract.ManagedByLabel: api.Name}); err != nil {
		return err
	}
	for i := range list.Items {
		np := &list.Items[i]
		owner := metav1.GetControllerOfNoCopy(np)
		if owner == nil || owner.Kind != view.AgentCardGVK.Kind || !match(*owner) || slices.Contains(keep, np.Name) {
			continue
		}
		err := r.Client.Delete(ctx, np, client.Preconditions{UID: &np.UID})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting NetworkPolicy %s: %w", np.Name, err)
		}
		log.FromContext(ctx).Info("deleted NetworkPolicy", "networkPolicy", np.Name, "agentCard", owner.Name)
		if card != nil {
			r.Recorder.Eventf(card, np, corev1.EventTypeNormal, "PolicyDeleted", "Delete", "deleted NetworkPolicy %s", np.Name)
		}
	}
	return nil
}

// report sets NetworkPolicyReady on the card through the StatusApplier: written only when it
// changed, lastTransitionTime moved only with its status, an Event when its status or reason
// changes (none for a first value that is True).
//
// A condition already written from this very resourceVersion of the card is not written again
// (writtenConditions): the cache has not caught up with the write yet.
func (r *Reconciler) report(ctx context.Context, u *unstructured.Unstructured, status metav1.ConditionStatus, reason, message string) error {
	key := types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}
	written := newWrittenCondition(u, status, reason, message)
	if r.written.has(key, written) {
		return nil
	}
	current := view.StatusOf(u)
	if c := current.Status.Condition(api.ConditionNetworkPolicyReady); c != nil && c.Status == status && c.Reason == reason &&
		c.Message == message && c.ObservedGeneration == u.GetGeneration() {
		return nil // the card shows it: nothing to write, nothing to note
	}
	desired := current.DeepCopyObject().(*view.CardStatus)
	desired.Status.Observe(u.GetGeneration())
	desired.Status.Set(api.ConditionNetworkPolicyReady, status, reason, message)
	if err := r.applyStatus(ctx, current, desired); err != nil {
		return err
	}
	r.written.set(key, written)
	return nil
}

// clearCondition gives up netpol's condition (mode off): the applier owns nothing else, so applying
// a status without it removes it and leaves agentcard's conditions alone.
func (r *Reconciler) clearCondition(ctx context.Context, u *unstructured.Unstructured) error {
	r.written.forget(types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()})
	current := view.StatusOf(u)
	desired := current.DeepCopyObject().(*view.CardStatus)
	desired.Status.Remove(api.ConditionNetworkPolicyReady)
	return r.applyStatus(ctx, current, desired)
}

// applyStatus writes the status; a card deleted meanwhile has nothing left to report on.
func (r *Reconciler) applyStatus(ctx context.Context, current, desired *view.CardStatus) error {
	if err := r.Status.Apply(ctx, current, desired); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
