package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/kit"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/registrar"
	"github.com/kagenti/platform/tokenexchange/internal/resources"
)

// notOwnedRetry is how soon a TokenExchange blocked by someone else's ConfigMap looks again: the
// blocking object may be garbage collected (its owner was deleted) or removed by the user, and
// neither is an event on anything this controller watches for that TokenExchange.
const notOwnedRetry = 15 * time.Second

// Reconciler turns a TokenExchange into the ConfigMap {workload}-token-exchange and reports the
// state of the workload's identity sidecars in its status.
type Reconciler struct {
	Client   client.Client
	Resolver *duck.Resolver
	// Applier writes the ConfigMap; with its APIReader it tells someone else's ConfigMap of the
	// same name (outside this controller's label-filtered cache) from a stale cache.
	Applier *kit.Applier
	// Status writes the status and records an Event when Ready changes, through Recorder.
	Status   *duck.StatusApplier
	Recorder recorder.EventRecorder
	// PodCache holds the cluster's pods as cachedPods, indexed by podTokenExchangeIndex.
	PodCache *kit.SlimPods[*cachedPod]
	// Pods reads which configuration the pods' identity sidecars run (propagation.go).
	Pods *PodStatusProber
	// Workloads starts the watch of a target's kind on first use; nil in tests that build a
	// Reconciler without a manager.
	Workloads *kit.WorkloadWatches
	// RestartStartedWithoutContent: evict the pods that started before the ConfigMap existed
	// (restart.go), within RestartWindow (0: DefaultRestartWindow) of the TokenExchange's creation.
	RestartStartedWithoutContent bool
	RestartWindow                time.Duration
	// Registrar registers the clients of clientAuthentication jwtSVID (registration.go); nil when
	// the controller runs without a SPIFFE identity.
	Registrar *Registrar
}

// +kubebuilder:rbac:groups=kagenti.io,resources=tokenexchanges,verbs=get;list;watch
// +kubebuilder:rbac:groups=kagenti.io,resources=tokenexchanges/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets;replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs;cronjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile: render the TokenExchange into its workload's ConfigMap, apply it, and set the status
// (with the workload's pods) through the shared model (kit.StatusReconciler).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	shell := kit.StatusReconciler[*v1alpha1.TokenExchange]{Client: r.Client, Status: r.Status,
		New: func() *v1alpha1.TokenExchange { return &v1alpha1.TokenExchange{} },
		Gone: func(key types.NamespacedName) {
			r.Pods.Forget(key)
			r.Pods.Forget(heldKey(key))
			r.Registrar.Forget(key)
		},
		Body: func(ctx context.Context, te *v1alpha1.TokenExchange) (ctrl.Result, bool, error) {
			s := newStatus(te)
			result, err := r.reconcile(ctx, te, s)
			s.dropUnset(propagationConditions...) // they describe pods only when the ConfigMap is in effect
			return result, s.hasVerdict(), err
		}}
	return shell.Reconcile(ctx, req)
}

func (r *Reconciler) reconcile(ctx context.Context, te *v1alpha1.TokenExchange, s status) (ctrl.Result, error) {
	ref := te.Spec.TargetRef
	// Watched before it is read, so a target missing now is seen when it appears.
	if r.Workloads != nil {
		if err := r.Workloads.Ensure(ref); err != nil {
			return ctrl.Result{}, err
		}
	}
	w, err := r.Resolver.Resolve(ctx, te.Namespace, ref)
	if err != nil {
		reason := duck.ReasonOf(err)
		if reason == "" {
			return ctrl.Result{}, fmt.Errorf("resolving %s: %w", ref, err)
		}
		s.targetNotResolved(reason, err.Error())
		return ctrl.Result{}, nil
	}
	s.set(v1alpha1.ConditionTargetResolved, true, v1alpha1.ReasonResolved, fmt.Sprintf("%s %s found", w.Kind(), w.Name()))
	tmpl, err := w.PodTemplate()
	if err != nil {
		return ctrl.Result{}, err
	}
	selector, err := w.Selector()
	if err != nil {
		s.noSelector(err)
		return ctrl.Result{}, nil
	}

	if inEffect, err := duck.ReferrerInEffectOf(ctx, r.Client, te, &v1alpha1.TokenExchangeList{}); err != nil {
		return ctrl.Result{}, err
	} else if inEffect != client.Object(te) {
		s.conflict(inEffect.GetName(), ref)
		return ctrl.Result{}, nil
	}
	if errs := te.Validate(); len(errs) > 0 {
		s.invalidSpec(errs.ToAggregate().Error())
		return ctrl.Result{}, nil
	}

	// The ConfigMap is written whether or not the workload is injected yet: it is inert until the
	// injector mounts it, and then takes effect without another reconcile. It is written before a
	// client registration (clientAuthentication jwtSVID), which waits on the SPIRE agent and the
	// provider: a pod starting meanwhile gets its startup settings, and the client registered
	// before keeps serving; a newly registered client is a second write.
	target := resources.Target{Kind: w.Kind(), Name: w.Name(), Namespace: w.Namespace()}
	if te.Spec.RegistersWithSVID() && s.ClientRegistration != nil {
		target.ClientID = s.ClientRegistration.ClientID
	}
	desired, stop, result, err := r.applyConfigMap(ctx, te, target, s)
	if stop {
		return result, err
	}
	clientID, regErr := r.registerClient(ctx, te, w.Name(), tmpl, s)
	if clientID != target.ClientID {
		target.ClientID = clientID
		if desired, stop, result, err = r.applyConfigMap(ctx, te, target, s); stop {
			return result, err
		}
	}
	if regErr != nil {
		// The pods wait for their client (the sidecars say so): Stalled while the controller has
		// no identity to register with (nothing changes until it is restarted with one),
		// Reconciling while the provider or the SPIRE agent fails (retried with backoff).
		msg := "the workload's client is not registered: " + regErr.Error()
		if r.Registrar == nil {
			s.stalled(v1alpha1.PhaseError, v1alpha1.ReasonRegistrarUnavailable, msg)
			return ctrl.Result{}, nil
		}
		s.reconciling(v1alpha1.PhasePending, registrar.KindOf(regErr), msg)
		return ctrl.Result{}, regErr
	}

	pods, err := r.pods(te.Namespace, selector, desired.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	ps := summarizePods(pods, desired.Name)
	s.IdentityStatus = ps.identity
	prop := r.Pods.Probe(ctx, client.ObjectKeyFromObject(te), ps.pods, kit.ContentHash(desired))
	retry := s.setPropagation(prop, desired.Name,
		fmt.Sprintf("kubectl rollout restart %s/%s (or delete the pods)", strings.ToLower(w.Kind()), w.Name()))
	done, again, err := r.restartPods(ctx, te, desired.Name, pods, ps.pods, prop, kit.ContentHash(desired))
	if err != nil {
		return ctrl.Result{}, err
	}
	if again2 := s.setRestarts(done, desired.Name); again2 > 0 && (again == 0 || again2 < again) {
		again = again2
	}
	if again > 0 && (retry == 0 || again < retry) {
		retry = again
	}
	if _, injected := tmpl.Annotations[contract.InjectionStatusAnnotation]; !injected {
		s.notInjected(fmt.Sprintf("%s %s has no %s annotation on its pod template: label it kagenti.io/inject=enabled in a namespace labelled kagenti.io/injection=enabled; ConfigMap %s is written and takes effect once the identity sidecars are injected",
			w.Kind(), w.Name(), contract.InjectionStatusAnnotation, desired.Name))
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	if len(prop.OwnedElsewhere) > 0 {
		// Stalled, not Reconciling: nothing changes until someone changes clientNameTemplate or
		// adopts the client. The Ready change is the Warning Event (duck.StatusApplier).
		s.stalled(v1alpha1.PhaseError, v1alpha1.ReasonClientOwnedElsewhere, prop.ownedElsewhereMessage())
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	s.ready(fmt.Sprintf("Identity infrastructure configured: %d of %d running pod(s) of %s %s run the current content of ConfigMap %s",
		len(prop.Current), prop.Pods, w.Kind(), w.Name(), desired.Name))
	return ctrl.Result{RequeueAfter: retry}, nil
}

// applyConfigMap writes te's ConfigMap for target and sets ConfigMapReady; stop when the reconcile
// ends there (someone else's ConfigMap, or a failed write), with its result.
func (r *Reconciler) applyConfigMap(ctx context.Context, te *v1alpha1.TokenExchange, target resources.Target, s status) (*corev1.ConfigMap, bool, ctrl.Result, error) {
	desired := resources.MakeConfigMap(te, target)
	s.ConfigMapName = desired.Name
	s.Delegation = te.Spec.EffectiveDelegation()
	s.MTLS = te.Spec.EffectiveMTLS()
	hadConfigMap := s.IsTrue(v1alpha1.ConditionConfigMapReady) // as stored, or as the first write of this reconcile set it
	res, err := r.Applier.Apply(ctx, desired, te)
	if notOwned := (*kit.NotOwnedError)(nil); errors.As(err, &notOwned) {
		s.configMapFailed(v1alpha1.ReasonConfigMapNotOwned, err.Error())
		return nil, true, ctrl.Result{RequeueAfter: notOwnedRetry}, nil
	} else if err != nil {
		s.configMapFailed(v1alpha1.ReasonApplyFailed, err.Error())
		return nil, true, ctrl.Result{}, err
	}
	if configMapWriteIsNews(res, hadConfigMap) {
		r.Recorder.Eventf(te, nil, corev1.EventTypeNormal, "ConfigMap"+string(res), "Apply", "ConfigMap %s %s", desired.Name, strings.ToLower(string(res)))
	}
	s.set(v1alpha1.ConditionConfigMapReady, true, v1alpha1.ReasonConfigured, fmt.Sprintf("ConfigMap %s holds generation %d", desired.Name, te.Generation))
	return desired, false, ctrl.Result{}, nil
}

// configMapWriteIsNews says whether a ConfigMap write deserves an Event: an update (the spec, or a
// hand edit reverted), or a creation while the stored status said the ConfigMap was in place
// (someone deleted it). The first creation is what creating the TokenExchange asks for, and its
// status says so; an Event for it would cost every TokenExchange an API write and the event
// recorder's memory for as long as it keeps the Event for de-duplication.
func configMapWriteIsNews(res kit.Result, hadConfigMap bool) bool {
	return res == kit.Updated || (res == kit.Created && hadConfigMap)
}
