package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/agenttrace/internal/resources"
	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/duck"
)

// +kubebuilder:rbac:groups=kagenti.io,resources=agenttraces,verbs=get;list;watch
// +kubebuilder:rbac:groups=kagenti.io,resources=agenttraces/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets;replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs;cronjobs,verbs=get;list;watch

// Condition reasons.
const (
	ReasonActive             = "Active"
	ReasonResolved           = "Resolved"
	ReasonConflict           = "Conflict"
	ReasonConfigMapApplied   = "Applied"
	ReasonConfigMapNotOwned  = "ConfigMapNotOwned"
	ReasonApplyFailed        = "ApplyFailed"
	ReasonTargetNotResolved  = "TargetNotResolved"
	ReasonDeprecatedExporter = "DeprecatedExporter"
	ReasonTargetNotInjected  = "TargetNotInjected"
)

// Pod-template facts the controller reads (docs/architecture.md §4, §5).
const (
	InjectionStatusAnnotation = "kagenti.io/injection-status"
	TraceVolumeName           = "kagenti-trace"
)

// Reconciler makes an AgentTrace's ConfigMap match its spec and reports what it did.
type Reconciler struct {
	Client   client.Client
	Resolver *duck.Resolver
	Applier  *configmap.Applier
	Recorder record.EventRecorder
	// LiveReader reads past the cache (which holds only this controller's ConfigMaps) to explain
	// a ConfigMap name collision.
	LiveReader client.Reader
	Options    Options
}

// outcome is what one reconcile found, turned into status at the end.
type outcome struct {
	phase          v1alpha1.Phase
	configMapName  string
	configuredPods int32
	conds          []metav1.Condition
}

func (o *outcome) set(condType string, status metav1.ConditionStatus, reason, msg string) {
	o.conds = append(o.conds, metav1.Condition{Type: condType, Status: status, Reason: reason, Message: msg})
}

// Reconcile: get → resolve target → resolve conflicts → apply ConfigMap → count pods → status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var at v1alpha1.AgentTrace
	if err := r.Client.Get(ctx, req.NamespacedName, &at); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !at.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the ConfigMap goes with it (owner reference)
	}
	out, result, reconcileErr := r.reconcile(ctx, &at)
	if err := r.writeStatus(ctx, &at, out); err != nil {
		return ctrl.Result{}, errors.Join(reconcileErr, err)
	}
	return result, reconcileErr
}

func (r *Reconciler) reconcile(ctx context.Context, at *v1alpha1.AgentTrace) (*outcome, ctrl.Result, error) {
	out := &outcome{}
	w, err := r.Resolver.Resolve(ctx, at.Namespace, at.Spec.TargetRef)
	if err != nil {
		reason := duck.ReasonOf(err)
		if reason == "" {
			return nil, ctrl.Result{}, fmt.Errorf("resolving %s: %w", at.Spec.TargetRef, err)
		}
		out.phase = v1alpha1.PhaseError
		if reason == duck.ReasonTargetNotFound {
			out.phase = v1alpha1.PhasePending // recovers by itself when the workload appears
		}
		out.set(v1alpha1.ConditionTargetResolved, metav1.ConditionFalse, reason, err.Error())
		out.set(v1alpha1.ConditionConfigMapReady, metav1.ConditionUnknown, ReasonTargetNotResolved, "waiting for the target")
		out.set(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, err.Error())
		r.event(at, corev1.EventTypeWarning, reason, err.Error())
		return out, ctrl.Result{}, nil
	}
	out.set(v1alpha1.ConditionTargetResolved, metav1.ConditionTrue, ReasonResolved,
		fmt.Sprintf("%s %q", w.Kind(), w.Name()))
	out.configMapName = configmap.TraceName(w.Name())

	if winner, err := r.conflictWinner(ctx, at); err != nil {
		return nil, ctrl.Result{}, err
	} else if winner != "" {
		msg := fmt.Sprintf("AgentTrace %q already configures %s %q (the oldest AgentTrace of a target wins); this one writes nothing until it is removed",
			winner, w.Kind(), w.Name())
		out.phase, out.configMapName = v1alpha1.PhaseError, ""
		out.set(v1alpha1.ConditionConfigMapReady, metav1.ConditionFalse, ReasonConflict, msg)
		out.set(v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonConflict, msg)
		r.event(at, corev1.EventTypeWarning, ReasonConflict, msg)
		return out, ctrl.Result{}, nil
	}

	desired, err := resources.MakeConfigMap(at, w)
	if err != nil {
		return nil, ctrl.Result{}, err
	}
	res, err := r.Applier.Apply(ctx, desired, at)
	if err != nil && (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) {
		err = r.explainConflict(ctx, desired, err)
	}
	var notOwned *configmap.NotOwnedError
	switch {
	case errors.As(err, &notOwned):
		out.phase = v1alpha1.PhaseError
		out.set(v1alpha1.ConditionConfigMapReady, metav1.ConditionFalse, ReasonConfigMapNotOwned, err.Error())
		out.set(v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonConfigMapNotOwned, err.Error())
		r.event(at, corev1.EventTypeWarning, ReasonConfigMapNotOwned, err.Error())
		return out, ctrl.Result{RequeueAfter: r.Options.NotOwnedRetry}, nil
	case err != nil:
		out.phase = v1alpha1.PhaseError
		out.set(v1alpha1.ConditionConfigMapReady, metav1.ConditionFalse, ReasonApplyFailed, err.Error())
		out.set(v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonApplyFailed, err.Error())
		return out, ctrl.Result{}, fmt.Errorf("applying ConfigMap %s: %w", desired.Name, err)
	}
	if res != configmap.Unchanged {
		r.event(at, corev1.EventTypeNormal, "ConfigMap"+string(res), fmt.Sprintf("ConfigMap %s %s", desired.Name, strings.ToLower(string(res))))
	}
	out.set(v1alpha1.ConditionConfigMapReady, metav1.ConditionTrue, ReasonConfigMapApplied,
		fmt.Sprintf("ConfigMap %s holds the configuration of generation %d", desired.Name, at.Generation))

	pods, err := r.configuredPods(ctx, w, desired.Name)
	if err != nil {
		return nil, ctrl.Result{}, err
	}
	out.configuredPods = pods
	out.phase = v1alpha1.PhaseActive
	reason, msg := ReasonActive, fmt.Sprintf("%s is up to date; %d running pod(s) mount it", desired.Name, pods)
	type warning struct{ reason, message string }
	var warnings []warning
	if injected, err := templateWired(w, desired.Name); err != nil {
		return nil, ctrl.Result{}, err
	} else if !injected {
		reason = ReasonTargetNotInjected
		warnings = append(warnings, warning{ReasonTargetNotInjected, fmt.Sprintf("%s %q is not injected (no %s annotation and no volume for ConfigMap %s on its pod template): "+
			"label it kagenti.io/inject=enabled in a namespace labelled kagenti.io/injection=enabled, or mount the ConfigMap yourself, "+
			"so the agent sees the files at /etc/kagenti/trace", w.Kind(), w.Name(), InjectionStatusAnnotation, desired.Name)})
	}
	for _, d := range resources.ResolveConfig(at, w).Deprecations() {
		if reason == ReasonActive {
			reason = ReasonDeprecatedExporter
		}
		warnings = append(warnings, warning{ReasonDeprecatedExporter, d})
	}
	if len(warnings) > 0 {
		report := specChanged(at) || readyReasonChanged(at, reason)
		for _, w := range warnings {
			msg += "; " + w.message
			if report {
				r.event(at, corev1.EventTypeWarning, w.reason, w.message)
			}
		}
	}
	out.set(v1alpha1.ConditionReady, metav1.ConditionTrue, reason, msg)
	return out, ctrl.Result{}, nil
}

// explainConflict turns a create/update conflict into a NotOwnedError when a ConfigMap of that
// name exists outside this controller's cache, i.e. without our managed-by label.
func (r *Reconciler) explainConflict(ctx context.Context, desired *corev1.ConfigMap, applyErr error) error {
	if r.LiveReader == nil {
		return applyErr
	}
	var have corev1.ConfigMap
	if err := r.LiveReader.Get(ctx, client.ObjectKeyFromObject(desired), &have); err != nil {
		return applyErr
	}
	if have.Labels[configmap.ManagedByLabel] != Name {
		return &configmap.NotOwnedError{Name: have.Name, Owner: "created by someone else (no " + configmap.ManagedByLabel + "=" + Name + " label)"}
	}
	return applyErr
}

// specChanged is true when this generation has not been reported yet; with readyReasonChanged it
// makes warnings Events once per change of the spec or of the situation, not once per pod event.
func specChanged(at *v1alpha1.AgentTrace) bool { return at.Status.ObservedGeneration != at.Generation }

func readyReasonChanged(at *v1alpha1.AgentTrace, reason string) bool {
	c := meta.FindStatusCondition(at.Status.Conditions, v1alpha1.ConditionReady)
	return c == nil || c.Reason != reason
}

// conflictWinner returns the name of the AgentTrace that owns at's target when it is not at: the
// oldest by creation time, then by name.
func (r *Reconciler) conflictWinner(ctx context.Context, at *v1alpha1.AgentTrace) (string, error) {
	gvk, err := at.Spec.TargetRef.GroupVersionKind()
	if err != nil {
		return "", err
	}
	var list v1alpha1.AgentTraceList
	if err := r.Client.List(ctx, &list, client.InNamespace(at.Namespace),
		client.MatchingFields{duck.TargetRefIndex: duck.TargetKey(gvk.GroupKind(), at.Spec.TargetRef.Name)}); err != nil {
		return "", fmt.Errorf("listing AgentTraces of %s: %w", at.Spec.TargetRef, err)
	}
	var live []v1alpha1.AgentTrace
	for _, o := range list.Items {
		if o.DeletionTimestamp.IsZero() || o.UID == at.UID {
			live = append(live, o)
		}
	}
	if len(live) <= 1 {
		return "", nil
	}
	sort.Slice(live, func(i, j int) bool {
		ti, tj := live[i].CreationTimestamp, live[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return live[i].Name < live[j].Name
	})
	if live[0].UID == at.UID {
		return "", nil
	}
	return live[0].Name, nil
}

// configuredPods counts the workload's running pods that mount the trace ConfigMap in a container.
func (r *Reconciler) configuredPods(ctx context.Context, w *duck.Workload, cmName string) (int32, error) {
	sel, err := w.Selector()
	if err != nil {
		return 0, nil // a workload we cannot select pods of has none we can count
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(w.Namespace()), client.MatchingLabelsSelector{Selector: sel},
		client.MatchingFields{podConfigMapIndex: cmName}); err != nil {
		return 0, fmt.Errorf("listing pods of %s %q: %w", w.Kind(), w.Name(), err)
	}
	var n int32
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp.IsZero() && mountsConfigMap(&p.Spec, cmName) {
			n++
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
	if _, ok := t.Annotations[InjectionStatusAnnotation]; ok {
		return true, nil
	}
	return mountsConfigMap(&t.Spec, cmName), nil
}

func (r *Reconciler) event(at *v1alpha1.AgentTrace, eventType, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Event(at, eventType, reason, msg)
	}
}

// writeStatus applies the status with server-side apply (field manager kagenti-agenttrace),
// keeping lastTransitionTime of conditions whose status did not change, and skips the write when
// nothing changed.
func (r *Reconciler) writeStatus(ctx context.Context, at *v1alpha1.AgentTrace, out *outcome) error {
	if out == nil {
		return nil
	}
	st := v1alpha1.AgentTraceStatus{
		ObservedGeneration: at.Generation,
		Phase:              out.phase,
		ConfigMapName:      out.configMapName,
		ConfiguredPods:     out.configuredPods,
		Conditions:         append([]metav1.Condition(nil), at.Status.Conditions...),
	}
	for _, c := range out.conds {
		c.ObservedGeneration = at.Generation
		meta.SetStatusCondition(&st.Conditions, c)
	}
	if statusEqual(&at.Status, &st) {
		return nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": m}}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("AgentTrace"))
	u.SetName(at.Name)
	u.SetNamespace(at.Namespace)
	err = r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(Name), client.ForceOwnership)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		log.FromContext(ctx).V(1).Info("status", "phase", st.Phase, "configMap", st.ConfigMapName, "pods", st.ConfiguredPods)
	}
	return err
}

func statusEqual(a, b *v1alpha1.AgentTraceStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || a.Phase != b.Phase ||
		a.ConfigMapName != b.ConfigMapName || a.ConfiguredPods != b.ConfiguredPods ||
		len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for _, c := range b.Conditions {
		old := meta.FindStatusCondition(a.Conditions, c.Type)
		if old == nil || old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message ||
			old.ObservedGeneration != c.ObservedGeneration || !old.LastTransitionTime.Equal(&c.LastTransitionTime) {
			return false
		}
	}
	return true
}
