package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/resources"
)

// InjectionStatusAnnotation is written by the injector on the pod template of every workload it
// injected (docs/architecture.md §4).
const InjectionStatusAnnotation = "kagenti.io/injection-status"

// notOwnedRetry is how soon a TokenExchange blocked by someone else's ConfigMap looks again: the
// blocking object may be garbage collected (its owner was deleted) or removed by the user, and
// neither is an event on anything this controller watches for that TokenExchange.
const notOwnedRetry = 15 * time.Second

// Reconciler turns a TokenExchange into the ConfigMap {workload}-token-exchange and reports the
// state of the workload's identity sidecars in its status.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader // uncached, to tell apart "ours, cache stale" from "someone else's"
	Resolver  *duck.Resolver
	Applier   *configmap.Applier
	Recorder  events.EventRecorder
	Selectors *SelectorIndex
	// Pods reads which configuration the pods' identity sidecars run (propagation.go).
	Pods *PodStatusProber
}

// +kubebuilder:rbac:groups=kagenti.io,resources=tokenexchanges,verbs=get;list;watch
// +kubebuilder:rbac:groups=kagenti.io,resources=tokenexchanges/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets;replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs;cronjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile: get → resolve the target → one TokenExchange per target → validate → render and
// apply the ConfigMap → read the pods → write status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	te := &v1alpha1.TokenExchange{}
	if err := r.Client.Get(ctx, req.NamespacedName, te); err != nil {
		if apierrors.IsNotFound(err) {
			r.Selectors.Forget(req.NamespacedName)
			r.Pods.Forget(req.NamespacedName)
			return ctrl.Result{}, nil // the ConfigMap goes with it (owner reference)
		}
		return ctrl.Result{}, err
	}
	if !te.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	st := newStatus(te)
	result, err := r.reconcile(ctx, te, st)
	st.dropUnset(propagationConditions...) // they describe pods only when the ConfigMap is in effect
	if c := meta.FindStatusCondition(st.s.Conditions, v1alpha1.ConditionReady); c != nil {
		log.FromContext(ctx).V(1).Info("reconciled", "phase", st.s.Phase, "reason", c.Reason, "generation", te.Generation)
	}
	if serr := r.writeStatus(ctx, te, st); serr != nil {
		return ctrl.Result{}, errors.Join(err, serr)
	}
	return result, err
}

func (r *Reconciler) reconcile(ctx context.Context, te *v1alpha1.TokenExchange, st *status) (ctrl.Result, error) {
	ref := te.Spec.TargetRef
	w, err := r.Resolver.Resolve(ctx, te.Namespace, ref)
	if err != nil {
		reason := duck.ReasonOf(err)
		if reason == "" {
			return ctrl.Result{}, fmt.Errorf("resolving %s: %w", ref, err)
		}
		r.Selectors.Forget(client.ObjectKeyFromObject(te))
		phase := v1alpha1.PhaseError
		if reason == duck.ReasonTargetNotFound {
			phase = v1alpha1.PhasePending // not an error of the CR: it recovers when the workload appears
		}
		st.set(v1alpha1.ConditionTargetResolved, false, reason, err.Error())
		st.set(v1alpha1.ConditionConfigMapReady, false, v1alpha1.ReasonWaitingForTarget, "waiting for the target workload")
		st.notReady(phase, reason, err.Error())
		return ctrl.Result{}, nil
	}
	st.set(v1alpha1.ConditionTargetResolved, true, v1alpha1.ReasonResolved, fmt.Sprintf("%s %s found", w.Kind(), w.Name()))

	tmpl, err := w.PodTemplate()
	if err != nil {
		return ctrl.Result{}, err
	}
	selector, err := w.Selector()
	if err != nil {
		st.set(v1alpha1.ConditionTargetResolved, false, duck.ReasonOf(err), err.Error())
		st.notReady(v1alpha1.PhaseError, duck.ReasonUnsupportedKind, err.Error())
		return ctrl.Result{}, nil
	}
	r.Selectors.Set(client.ObjectKeyFromObject(te), selector)

	if winner, err := r.winner(ctx, te); err != nil {
		return ctrl.Result{}, err
	} else if winner != nil {
		msg := fmt.Sprintf("TokenExchange %q, created earlier, already configures %s; this one writes nothing until it is deleted",
			winner.Name, ref)
		st.set(v1alpha1.ConditionConfigMapReady, false, v1alpha1.ReasonConflict, msg)
		st.notReady(v1alpha1.PhaseError, v1alpha1.ReasonConflict, msg)
		return ctrl.Result{}, nil
	}

	if errs := te.Validate(); len(errs) > 0 {
		msg := errs.ToAggregate().Error()
		st.set(v1alpha1.ConditionConfigMapReady, false, v1alpha1.ReasonInvalidSpec, "not written: "+msg)
		st.notReady(v1alpha1.PhaseError, v1alpha1.ReasonInvalidSpec, msg)
		return ctrl.Result{}, nil
	}

	// The ConfigMap is written whether or not the workload is injected yet: it is inert until the
	// injector mounts it, and then takes effect without another reconcile.
	desired := resources.MakeConfigMap(te, resources.Target{Kind: w.Kind(), Name: w.Name(), Namespace: w.Namespace()})
	st.s.ConfigMapName = desired.Name
	res, err := r.Applier.Apply(ctx, desired, te)
	if err != nil {
		if msg, notOwned := r.notOwned(ctx, desired, err); notOwned {
			st.set(v1alpha1.ConditionConfigMapReady, false, v1alpha1.ReasonConfigMapNotOwned, msg)
			st.notReady(v1alpha1.PhaseError, v1alpha1.ReasonConfigMapNotOwned, msg)
			return ctrl.Result{RequeueAfter: notOwnedRetry}, nil
		}
		st.set(v1alpha1.ConditionConfigMapReady, false, v1alpha1.ReasonApplyFailed, err.Error())
		st.notReady(v1alpha1.PhaseError, v1alpha1.ReasonApplyFailed, err.Error())
		return ctrl.Result{}, err
	}
	if res != configmap.Unchanged {
		r.Recorder.Eventf(te, nil, corev1.EventTypeNormal, "ConfigMap"+string(res), "Apply", "ConfigMap %s %s", desired.Name, strings.ToLower(string(res)))
	}
	st.set(v1alpha1.ConditionConfigMapReady, true, v1alpha1.ReasonConfigured, fmt.Sprintf("ConfigMap %s holds generation %d", desired.Name, te.Generation))

	pods, err := r.pods(ctx, te.Namespace, selector, desired.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	ps := summarizePods(pods, desired.Name)
	st.s.IdentityStatus = ps.identity
	prop := r.Pods.Probe(ctx, client.ObjectKeyFromObject(te), ps.pods, configmap.ContentHash(desired))
	retry := st.setPropagation(prop, desired.Name,
		fmt.Sprintf("kubectl rollout restart %s/%s (or delete the pods)", strings.ToLower(w.Kind()), w.Name()))

	if _, injected := tmpl.Annotations[InjectionStatusAnnotation]; !injected {
		msg := fmt.Sprintf("%s %s has no %s annotation on its pod template: label it kagenti.io/inject=enabled in a namespace labelled kagenti.io/injection=enabled; ConfigMap %s is written and takes effect once the identity sidecars are injected",
			w.Kind(), w.Name(), InjectionStatusAnnotation, desired.Name)
		st.notReady(v1alpha1.PhasePending, v1alpha1.ReasonNotInjected, msg)
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	msg := fmt.Sprintf("Identity infrastructure configured: %d of %d running pod(s) of %s %s run the current content of ConfigMap %s",
		len(prop.Current), prop.Pods, w.Kind(), w.Name(), desired.Name)
	st.ready(msg)
	return ctrl.Result{RequeueAfter: retry}, nil
}

// winner returns the TokenExchange that configures te's target when it is not te: the oldest one
// (creation time, then name) referencing the same workload. nil means te is in effect.
func (r *Reconciler) winner(ctx context.Context, te *v1alpha1.TokenExchange) (*v1alpha1.TokenExchange, error) {
	gvk, err := te.Spec.TargetRef.GroupVersionKind()
	if err != nil {
		return nil, err
	}
	var list v1alpha1.TokenExchangeList
	if err := r.Client.List(ctx, &list, client.InNamespace(te.Namespace),
		client.MatchingFields{duck.TargetRefIndex: duck.TargetKey(gvk.GroupKind(), te.Spec.TargetRef.Name)}); err != nil {
		return nil, err
	}
	if len(list.Items) < 2 {
		return nil, nil
	}
	live := list.Items[:0]
	for _, o := range list.Items {
		if o.DeletionTimestamp.IsZero() {
			live = append(live, o)
		}
	}
	sort.Slice(live, func(i, j int) bool { return older(&live[i], &live[j]) })
	if len(live) == 0 || live[0].UID == te.UID {
		return nil, nil
	}
	if !older(&live[0], te) { // te is not in the (stale) cache yet but is the oldest
		return nil, nil
	}
	return &live[0], nil
}

func older(a, b *v1alpha1.TokenExchange) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// notOwned tells whether Apply failed because a ConfigMap of that name belongs to someone else.
// The ConfigMap cache only holds this controller's ConfigMaps, so a foreign one surfaces as a
// create conflict; one uncached read confirms it.
func (r *Reconciler) notOwned(ctx context.Context, desired *corev1.ConfigMap, err error) (string, bool) {
	var no *configmap.NotOwnedError
	if errors.As(err, &no) {
		return no.Error(), true
	}
	if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
		return "", false
	}
	var have corev1.ConfigMap
	if gerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), &have); gerr != nil {
		return "", false
	}
	if have.Labels[configmap.ManagedByLabel] == r.Applier.ManagedBy {
		return "", false
	}
	return (&configmap.NotOwnedError{Name: have.Name, Owner: "no " + configmap.ManagedByLabel + "=" + r.Applier.ManagedBy + " label"}).Error(), true
}

// status accumulates the status of one reconcile. Conditions start from the stored ones so that
// meta.SetStatusCondition keeps lastTransitionTime when a condition's status does not change.
type status struct {
	s          v1alpha1.TokenExchangeStatus
	generation int64
	setTypes   map[string]bool // the conditions this reconcile set
}

var ownConditions = []string{v1alpha1.ConditionReady, v1alpha1.ConditionTargetResolved, v1alpha1.ConditionConfigMapReady,
	v1alpha1.ConditionConfigPropagated, v1alpha1.ConditionStartupSettingsCurrent}

// propagationConditions are set only when the reconcile reached the pods.
var propagationConditions = []string{v1alpha1.ConditionConfigPropagated, v1alpha1.ConditionStartupSettingsCurrent}

func newStatus(te *v1alpha1.TokenExchange) *status {
	st := &status{generation: te.Generation, setTypes: map[string]bool{}}
	st.s.ObservedGeneration = te.Generation
	for _, c := range te.Status.Conditions {
		for _, own := range ownConditions {
			if c.Type == own {
				st.s.Conditions = append(st.s.Conditions, c)
			}
		}
	}
	return st
}

func (st *status) set(condType string, ok bool, reason, msg string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.s.Conditions, metav1.Condition{
		Type: condType, Status: s, Reason: reason, Message: truncate(msg), ObservedGeneration: st.generation,
	})
	st.setTypes[condType] = true
}

// dropUnset removes the conditions of these types that this reconcile did not set (stale ones).
func (st *status) dropUnset(types ...string) {
	for _, t := range types {
		if !st.setTypes[t] {
			meta.RemoveStatusCondition(&st.s.Conditions, t)
		}
	}
}

func (st *status) notReady(phase, reason, msg string) {
	st.s.Phase, st.s.Message = phase, truncate(msg)
	st.set(v1alpha1.ConditionReady, false, reason, msg)
}

func (st *status) ready(msg string) {
	st.s.Phase, st.s.Message = v1alpha1.PhaseActive, msg
	st.set(v1alpha1.ConditionReady, true, v1alpha1.ReasonConfigured, msg)
}

func truncate(s string) string {
	const max = 2048
	if len(s) > max {
		return s[:max-3] + "..."
	}
	return s
}
