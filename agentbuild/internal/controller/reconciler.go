package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/kit"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/resources"
	"github.com/kagenti/platform/agentbuild/internal/tekton"
	"github.com/kagenti/platform/agentbuild/internal/templates"
)

const fieldOwner = resources.ManagedBy

// BuilderClusterRole is the ClusterRole a build's namespace must bind to the controller's
// ServiceAccount (internal/rbac/builder).
const BuilderClusterRole = "kagenti-agentbuild-builder"

// Cluster-wide: watch builds, their runs and (metadata of) deployTo targets, report status and
// Events, and watch the ConfigMaps labelled kagenti.io/build-template (templates and steps, in the
// template namespace and the build namespaces: templates.NewCache; RBAC cannot restrict a watch
// by label, so this is list/watch of ConfigMaps, of which only the labelled ones are requested and
// kept). What a build does inside its namespace is ClusterRole kagenti-agentbuild-builder
// (internal/rbac/builder), bound per namespace.
// +kubebuilder:rbac:groups=kagenti.io,resources=agentbuilds,verbs=get;list;watch
// +kubebuilder:rbac:groups=kagenti.io,resources=agentbuilds/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=tekton.dev,resources=pipelineruns,verbs=list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets;replicasets,verbs=list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs;cronjobs,verbs=list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=list;watch

// Reconciler turns an AgentBuild into a Pipeline and a PipelineRun per generation and reports the
// run's outcome. Flow: Tekton served? → run of this generation exists? else load template, render,
// create → map the run's status → deploy the image → prune old runs → apply status.
type Reconciler struct {
	Client   client.Client
	API      client.Reader // uncached reads: deploy targets, just-created runs
	Scheme   *runtime.Scheme
	Recorder recorder.EventRecorder
	Status   *duck.StatusApplier
	Loader   *templates.Loader
	Resolver *duck.Resolver
	Tekton   *tektonWatch
	Opts     Options
}

// Reconcile: make the build's Tekton objects match its spec and report in status through the
// shared model (kit.StatusReconciler); owned Pipelines and PipelineRuns go with a deleted build.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	shell := kit.StatusReconciler[*v1alpha1.AgentBuild]{Client: r.Client, Status: r.Status,
		New: func() *v1alpha1.AgentBuild { return &v1alpha1.AgentBuild{} },
		Body: func(ctx context.Context, b *v1alpha1.AgentBuild) (ctrl.Result, bool, error) {
			s := newStatus(b)
			result, err := r.reconcile(ctx, b, s)
			return result, s.hasVerdict(), err
		}}
	return shell.Reconcile(ctx, req)
}

func (r *Reconciler) reconcile(ctx context.Context, b *v1alpha1.AgentBuild, s status) (ctrl.Result, error) {
	served, err := r.Tekton.Ensure(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !served {
		s.tektonNotInstalled(r.Opts.TektonCheckInterval.String())
		return ctrl.Result{RequeueAfter: r.Opts.TektonCheckInterval}, nil
	}
	run, err := r.currentRun(ctx, b)
	if err != nil {
		return ctrl.Result{}, err
	}
	if run == nil {
		var retry time.Duration
		if run, retry, err = r.startRun(ctx, b, s); run == nil || err != nil {
			return ctrl.Result{RequeueAfter: retry}, err
		}
	}
	if !metav1.IsControlledBy(run, b) {
		s.nameConflict(run.Name)
		return ctrl.Result{}, nil
	}
	s.observeRun(run)
	if b.Spec.DeployTo != nil {
		if err := r.deploy(ctx, b, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	if run.IsDone() && b.Spec.CleanupEnabled() {
		if err := r.cleanupWorkspace(ctx, run); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, r.prune(ctx, b)
}

// currentRun returns the PipelineRun of the build's generation, or nil.
func (r *Reconciler) currentRun(ctx context.Context, b *v1alpha1.AgentBuild) (*tekton.PipelineRun, error) {
	run := &tekton.PipelineRun{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: resources.RunName(b)}, run)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return run, err
}

// startRun loads the template, renders and creates the Pipeline and PipelineRun. The run's name
// is deterministic, so when the cache has not seen a run created by an earlier attempt, creation
// fails with AlreadyExists and the existing run is used: a generation never gets two runs.
func (r *Reconciler) startRun(ctx context.Context, b *v1alpha1.AgentBuild, s status) (*tekton.PipelineRun, time.Duration, error) {
	loaded, err := r.Loader.Load(ctx, b)
	var rendered *resources.Rendered
	if err == nil {
		rendered, err = resources.Render(b, loaded)
	}
	if err != nil {
		reason := resources.Reason(err)
		if reason == "" {
			return nil, 0, err
		}
		// Ready's Event (from the StatusApplier) says TemplateNotResolved; this one names the
		// precise problem, also when it changes while Ready stays the same.
		if c := b.Status.Condition(v1alpha1.ConditionTemplateResolved); c == nil || c.Reason != reason || c.Message != err.Error() || c.ObservedGeneration != b.Generation {
			r.event(b, "Warning", reason, "ResolveTemplate", err.Error())
		}
		s.templateFailed(reason, err.Error())
		return nil, r.Opts.TemplateRetryInterval, nil
	}
	err = r.Client.Create(ctx, rendered.Pipeline, client.FieldOwner(fieldOwner))
	if apierrors.IsForbidden(err) {
		return nil, r.notPermitted(b, s, err), nil
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, 0, fmt.Errorf("creating Pipeline %s: %w", rendered.Pipeline.Name, err)
	}
	run := rendered.PipelineRun
	err = r.Client.Create(ctx, run, client.FieldOwner(fieldOwner))
	switch {
	case apierrors.IsForbidden(err):
		return nil, r.notPermitted(b, s, err), nil
	case apierrors.IsAlreadyExists(err):
		run = &tekton.PipelineRun{}
		if err := r.API.Get(ctx, client.ObjectKeyFromObject(rendered.PipelineRun), run); err != nil {
			return nil, 0, err
		}
	case err != nil:
		return nil, 0, fmt.Errorf("creating PipelineRun %s: %w", run.Name, err)
	default:
		log.FromContext(ctx).Info("started build", "pipelineRun", run.Name, "mode", loaded.Mode)
		r.event(b, "Normal", "BuildStarted", "Build", fmt.Sprintf("started PipelineRun %s (mode %s)", run.Name, loaded.Mode))
	}
	s.newGeneration()
	return run, 0, nil
}

// notPermitted reports a build the API server refused to the controller (no binding of the builder
// ClusterRole in its namespace) and says when to try again: a RoleBinding created later is no
// event the controller watches.
func (r *Reconciler) notPermitted(b *v1alpha1.AgentBuild, s status, err error) time.Duration {
	if c := b.Status.Condition(v1alpha1.ConditionReady); c == nil || c.Reason != v1alpha1.ReasonBuildNotPermitted || c.ObservedGeneration != b.Generation {
		r.event(b, "Warning", v1alpha1.ReasonBuildNotPermitted, "Build", fmt.Sprintf("may not build in namespace %s: bind ClusterRole %s there", b.Namespace, BuilderClusterRole))
	}
	s.notPermitted(b.Namespace, err)
	return r.Opts.TemplateRetryInterval
}

func (r *Reconciler) event(b *v1alpha1.AgentBuild, eventType, reason, action, note string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(b, nil, eventType, reason, action, "%s", note)
	}
}
