// Package controller reconciles AgentBuilds into Tekton Pipelines and PipelineRuns.
package controller

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/kagenti/platform/pkg/duck"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/resources"
	"github.com/kagenti/platform/agentbuild/internal/templates"
)

// Options are the pillar-specific settings taken from the command line.
type Options struct {
	// TemplateNamespace holds the default templates (looked up after the build's own namespace).
	TemplateNamespace string
	// TektonCheckInterval is how often a build waiting for Tekton to be installed is retried.
	TektonCheckInterval time.Duration
	// TemplateRetryInterval is how often a build whose template or step ConfigMap is missing or
	// invalid is retried (template changes do not re-queue builds: a template is read when a new
	// generation is built, and a stalled build looks again at this interval).
	TemplateRetryInterval time.Duration
	// Namespaces restricts the template cache like the manager's cache (--namespaces); empty
	// watches labelled ConfigMaps in every namespace. The template namespace is always watched.
	Namespaces []string
	// MaxConcurrentReconciles is the number of AgentBuilds reconciled in parallel (default
	// DefaultMaxConcurrentReconciles).
	MaxConcurrentReconciles int
}

// DefaultMaxConcurrentReconciles: a reconcile waits on API round trips (the Pipeline and
// PipelineRun, the status), so one worker left 10,000 builds queued behind one another for most
// of an hour; a few keep the API server busy instead.
const DefaultMaxConcurrentReconciles = 4

func (o *Options) defaults() {
	if o.TemplateNamespace == "" {
		o.TemplateNamespace = templates.DefaultNamespace
	}
	if o.TektonCheckInterval <= 0 {
		o.TektonCheckInterval = 30 * time.Second
	}
	if o.TemplateRetryInterval <= 0 {
		o.TemplateRetryInterval = time.Minute
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
}

// Setup registers the AgentBuild reconciler with mgr. The PipelineRun watch is added later, by
// the reconciler, once the Tekton kinds are served (see tekton.go): registering it here would make
// the manager fail to start on a cluster without Tekton.
func Setup(mgr ctrl.Manager, opts Options) error {
	_, err := setup(mgr, opts)
	return err
}

// setup is Setup returning the registered reconciler, for tests that reconcile beside it.
func setup(mgr ctrl.Manager, opts Options) (*Reconciler, error) {
	opts.defaults()
	ctx := context.Background()
	if err := duck.IndexTargetRef(ctx, mgr.GetFieldIndexer(), &v1alpha1.AgentBuild{}); err != nil {
		return nil, err
	}
	tc, err := templates.NewCache(mgr, opts.TemplateNamespace, opts.Namespaces)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(templates.Runnable{Cache: tc}); err != nil {
		return nil, err
	}
	r := newReconciler(mgr, opts, tc)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("agentbuild").
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
		For(&v1alpha1.AgentBuild{}, builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	// A deployTo target that appears (or changes its spec) re-queues the builds that point at it,
	// so TargetNotFound recovers without polling. Metadata-only: only names are needed.
	for _, gvk := range duck.BuiltinKinds() {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		b = b.WatchesMetadata(obj, duck.EnqueueReferrers(mgr.GetClient(), gvk.GroupKind(), func() client.ObjectList { return &v1alpha1.AgentBuildList{} }),
			builder.WithPredicates(targetChanged))
	}
	c, err := b.Build(r)
	if err != nil {
		return nil, err
	}
	r.Tekton.controller = c
	return r, nil
}

// targetChanged passes creations and spec changes of workloads; status churn is ignored.
var targetChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return true },
	UpdateFunc:  func(e event.UpdateEvent) bool { return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// newReconciler builds the reconciler; templateReader serves the template and step ConfigMaps
// (the cache of templates.NewCache).
func newReconciler(mgr ctrl.Manager, opts Options, templateReader client.Reader) *Reconciler {
	opts.defaults()
	events := mgr.GetEventRecorder(resources.ManagedBy)
	return &Reconciler{
		Client:   mgr.GetClient(),
		API:      mgr.GetAPIReader(),
		Scheme:   mgr.GetScheme(),
		Recorder: events,
		Status: &duck.StatusApplier{
			Client: mgr.GetClient(), FieldOwner: fieldOwner, Recorder: events, RequireCurrent: true,
			// BuildStarted (and the precise template problem) already say how a build starts.
			NoFirstValueEvent: true,
			Conditions:        []string{v1alpha1.ConditionSucceeded, v1alpha1.ConditionTemplateResolved, v1alpha1.ConditionDeployed},
		},
		Loader:   &templates.Loader{Reader: templateReader, Namespace: opts.TemplateNamespace},
		Resolver: &duck.Resolver{Reader: mgr.GetAPIReader(), Mapper: mgr.GetRESTMapper()},
		Tekton:   &tektonWatch{mapper: mgr.GetRESTMapper(), cache: mgr.GetCache(), scheme: mgr.GetScheme()},
		Opts:     opts,
	}
}
