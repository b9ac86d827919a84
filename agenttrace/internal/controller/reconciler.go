package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/agenttrace/internal/resources"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// +kubebuilder:rbac:groups=kagenti.io,resources=agenttraces,verbs=get;list;watch
// +kubebuilder:rbac:groups=kagenti.io,resources=agenttraces/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// The controller records its Events through events.k8s.io; controller-runtime's leader election
// still records through the core API.
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets;replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs;cronjobs,verbs=get;list;watch

// Reconciler makes an AgentTrace's ConfigMap match its spec and reports what it did.
type Reconciler struct {
	Client   client.Client
	Resolver *duck.Resolver
	// Applier writes the ConfigMap; with its APIReader it tells someone else's ConfigMap of the
	// same name (outside this controller's label-filtered cache) from a stale cache.
	Applier *kit.Applier
	// Status writes the status and records an Event when Ready changes, through Recorder.
	Status   *duck.StatusApplier
	Recorder recorder.EventRecorder
	Options  Options
	// PodCache holds the cluster's pods as cachedPods, indexed by podConfigMapIndex.
	PodCache *kit.SlimPods[*cachedPod]
	// Workloads starts the watch of a target's kind on first use; nil in tests that build a
	// Reconciler without a manager.
	Workloads *kit.WorkloadWatches
}

// Reconcile: render the trace ConfigMap of the AgentTrace's target, apply it, and set the status
// through the shared model (kit.StatusReconciler).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	shell := kit.StatusReconciler[*v1alpha1.AgentTrace]{Client: r.Client, Status: r.Status,
		New: func() *v1alpha1.AgentTrace { return &v1alpha1.AgentTrace{} },
		Body: func(ctx context.Context, at *v1alpha1.AgentTrace) (ctrl.Result, bool, error) {
			s := newStatus(at)
			result, err := r.reconcile(ctx, at, s)
			return result, s.hasVerdict(), err
		}}
	return shell.Reconcile(ctx, req)
}

func (r *Reconciler) reconcile(ctx context.Context, at *v1alpha1.AgentTrace, s status) (ctrl.Result, error) {
	// Watched before it is read, so a target missing now is seen when it appears.
	if r.Workloads != nil {
		if err := r.Workloads.Ensure(at.Spec.TargetRef); err != nil {
			return ctrl.Result{}, err
		}
	}
	w, err := r.Resolver.Resolve(ctx, at.Namespace, at.Spec.TargetRef)
	if err != nil {
		reason := duck.ReasonOf(err)
		if reason == "" {
			return ctrl.Result{}, fmt.Errorf("resolving %s: %w", at.Spec.TargetRef, err)
		}
		s.targetNotResolved(reason, err.Error())
		return ctrl.Result{}, nil
	}
	s.targetResolved(w)
	if inEffect, err := duck.ReferrerInEffectOf(ctx, r.Client, at, &v1alpha1.AgentTraceList{}); err != nil {
		return ctrl.Result{}, err
	} else if inEffect != client.Object(at) {
		s.conflict(inEffect.GetName(), w)
		return ctrl.Result{}, nil
	}

	desired, err := resources.MakeConfigMap(at, w)
	if err != nil {
		return ctrl.Result{}, err
	}
	hadConfigMap := s.IsTrue(v1alpha1.ConditionConfigMapReady) // as stored: this reconcile has not set it yet
	res, err := r.Applier.Apply(ctx, desired, at)
	if notOwned := (*kit.NotOwnedError)(nil); errors.As(err, &notOwned) {
		s.configMapFailed(desired.Name, v1alpha1.ReasonConfigMapNotOwned, err.Error())
		return ctrl.Result{RequeueAfter: r.Options.NotOwnedRetry}, nil
	} else if err != nil {
		s.configMapFailed(desired.Name, v1alpha1.ReasonApplyFailed, err.Error())
		return ctrl.Result{}, fmt.Errorf("applying ConfigMap %s: %w", desired.Name, err)
	}
	if configMapWriteIsNews(res, hadConfigMap) {
		r.Recorder.Eventf(at, nil, corev1.EventTypeNormal, "ConfigMap"+string(res), "Apply", "ConfigMap %s %s", desired.Name, strings.ToLower(string(res)))
	}
	s.configMapApplied(desired.Name)

	pods, err := r.configuredPods(w, desired.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	warnings, err := warnings(at, w, desired.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.active(pods, warnings)
	if s.reportWarnings() {
		for _, w := range warnings {
			r.Recorder.Eventf(at, nil, corev1.EventTypeWarning, w.reason, "Reconcile", "%s", w.message)
		}
	}
	return ctrl.Result{}, nil
}

// warnings are what the agent may miss although the ConfigMap is written: the workload is not
// injected, or an exporter is deprecated.
func warnings(at *v1alpha1.AgentTrace, w *duck.Workload, cmName string) ([]warning, error) {
	var out []warning
	if injected, err := templateWired(w, cmName); err != nil {
		return nil, err
	} else if !injected {
		out = append(out, warning{v1alpha1.ReasonTargetNotInjected, fmt.Sprintf("%s %q is not injected (no %s annotation and no volume for ConfigMap %s on its pod template): "+
			"label it kagenti.io/inject=enabled in a namespace labelled kagenti.io/injection=enabled, or mount the ConfigMap yourself, "+
			"so the agent sees the files at %s", w.Kind(), w.Name(), contract.InjectionStatusAnnotation, cmName, contract.PathTrace)})
	}
	// One warning for all deprecated exporters: Events of one reason on one object are a single
	// series (events.k8s.io), so one per exporter would show only the first.
	if d := resources.ResolveConfig(at, w).Deprecations(); len(d) > 0 {
		out = append(out, warning{v1alpha1.ReasonDeprecatedExporter, strings.Join(d, "; ")})
	}
	return out, nil
}

// configuredPods counts the workload's running pods that mount the trace ConfigMap in a container.
func (r *Reconciler) configuredPods(w *duck.Workload, cmName string) (int32, error) {
	sel, err := w.Selector()
	if err != nil {
		return 0, nil // a workload we cannot select pods of has none we can count
	}
	pods, err := r.PodCache.List(podConfigMapIndex, w.Namespace(), cmName)
	if err != nil {
		return 0, fmt.Errorf("listing pods of %s %q: %w", w.Kind(), w.Name(), err)
	}
	var n int32
	for _, p := range pods {
		if p.running && p.DeletionTimestamp.IsZero() && sel.Matches(labels.Set(p.Labels)) {
			n++ // the index holds it under cmName: a container of it mounts the ConfigMap
		}
	}
	return n, nil
}

// mountsConfigMap: a volume (normally kagenti-trace) backed by cmName is mounted by a container.
func mountsConfigMap(spec *corev1.PodSpec, cmName string) bool {
	vols := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cmName {
			vols[v.Name] = true
		}
	}
	if len(vols) == 0 {
		return false
	}
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for _, c := range cs {
			for _, m := range c.VolumeMounts {
				if vols[m.Name] {
					return true
				}
			}
		}
	}
	return false
}

// templateWired: the injector has processed the pod template, or the user mounts the ConfigMap.
func templateWired(w *duck.Workload, cmName string) (bool, error) {
	t, err := w.PodTemplate()
	if err != nil {
		return false, err
	}
	if _, ok := t.Annotations[contract.InjectionStatusAnnotation]; ok {
		return true, nil
	}
	return mountsConfigMap(&t.Spec, cmName), nil
}

// configMapWriteIsNews says whether a ConfigMap write deserves an Event: an update (the spec, or a
// hand edit reverted), or a creation while the stored status said the ConfigMap was in place
// (someone deleted it). The first creation is what creating the AgentTrace asks for, and its status
// says so; an Event for it would cost every AgentTrace an API write and the event recorder's memory
// for as long as it keeps the Event for de-duplication.
func configMapWriteIsNews(res kit.Result, hadConfigMap bool) bool {
	return res == kit.Updated || (res == kit.Created && hadConfigMap)
}
