// Package controller wires netpol's reconciler into a controller-runtime manager: it waits for the
// AgentCard CRD, indexes AgentCards by target workload and watches cards, policies and workloads.
package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/kagenti/platform/netpol/api"
	"github.com/kagenti/platform/netpol/internal/resources"
	"github.com/kagenti/platform/netpol/internal/view"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// Client rate limits of the binary (flags --kube-api-qps, --kube-api-burst). The default, a
// negative QPS, is no client-side limit, as every other Kagenti binary runs (controller-runtime's
// default): the API server's priority and fairness paces the client. Every AgentCard costs about two
// writes (its policy and its condition); a 50 QPS cap took 18 s to converge 1,000 cards.
const (
	DefaultQPS   float32 = -1
	DefaultBurst         = 100
)

// DefaultMaxConcurrentReconciles is the number of AgentCards reconciled in parallel: each
// reconcile waits on one or two API round trips, so a few workers keep the API server busy
// without a queue of 1,000 cards draining one at a time.
const DefaultMaxConcurrentReconciles = 8

// Options are the pillar-specific settings taken from the command line.
type Options struct {
	// Mode is ModeEnforce, ModeAudit or ModeOff.
	Mode string
	// Policy configures the rendered policies.
	Policy resources.Options
	// CRDPollInterval is how often to look for the AgentCard CRD while it is missing (default 10s).
	CRDPollInterval time.Duration
	// MaxConcurrentReconciles is the number of AgentCards reconciled in parallel (default 8).
	MaxConcurrentReconciles int
}

// DefaultOptions are the flag defaults.
func DefaultOptions() Options {
	return Options{Mode: ModeEnforce, Policy: resources.DefaultOptions(), CRDPollInterval: 10 * time.Second,
		MaxConcurrentReconciles: DefaultMaxConcurrentReconciles}
}

// Validate reports bad flag values by flag name.
func (o Options) Validate() error {
	switch o.Mode {
	case ModeEnforce, ModeAudit, ModeOff:
	default:
		return fmt.Errorf("--mode: %q is not one of enforce, audit, off", o.Mode)
	}
	return o.Policy.Validate()
}

// CacheByObject restricts the NetworkPolicy cache to the policies netpol manages, so a cluster full
// of other policies costs no memory here, and keeps them with their specs digested
// (digestPolicySpec). Of every workload it keeps only what netpol reads: the identity part of its
// metadata and its pod selector: spec.selector, or its pod template's labels where they select the
// pods (CronJob) (selectorOnly). Pass it as cache.Options.ByObject, with DefaultTransform.
func CacheByObject() map[client.Object]cache.ByObject {
	by := kit.TrimmedWorkloads(templateLabelsOnly)
	for obj, o := range by {
		o.Transform = selectorOnly(o.Transform)
		by[obj] = o
	}
	by[&networkingv1.NetworkPolicy{}] = cache.ByObject{
		Label:     labels.SelectorFromSet(labels.Set{contract.ManagedByLabel: api.Name}),
		Transform: digestPolicySpec,
	}
	return by
}

// DefaultTransform is the cache transform of the kinds CacheByObject does not name: managedFields
// stripped, and AgentCards trimmed to their metadata, target and conditions (view.TrimAgentCard),
// without the A2A card and fetch results agentcard keeps in their status. AgentCards cannot be a
// CacheByObject entry: the cache resolves those kinds when the manager is built, and netpol starts
// before the AgentCard CRD is installed. Pass it as cache.Options.DefaultTransform.
func DefaultTransform() toolscache.TransformFunc {
	strip := cache.TransformStripManagedFields()
	return func(obj any) (any, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind() == view.AgentCardGVK {
			return view.TrimAgentCard(u)
		}
		return strip(obj)
	}
}

// workloadIdentity are the metadata fields of a workload netpol reads: which workload it is
// (events map it to its AgentCards by namespace and name), its generation (workload events are
// filtered by it) and whether it is being deleted.
var workloadIdentity = []string{"name", "namespace", "uid", "resourceVersion", "generation", "deletionTimestamp"}

// selectorOnly wraps a workload cache transform (kit.TrimWorkload): of the metadata it keeps only
// workloadIdentity, and it empties the pod template where spec.selector selects the pods
// (resources.WorkloadPodSelector reads the template's labels only for CronJobs and kinds without
// a selector). Labels and annotations (Helm's, Argo CD's, kubectl's, the Deployment controller's
// revision) and the template's labels were most of a trimmed workload, and netpol read none of them.
func selectorOnly(trim toolscache.TransformFunc) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		out, err := trim(obj)
		if err != nil {
			return out, err
		}
		switch o := out.(type) {
		case *unstructured.Unstructured:
			if meta, ok := o.Object["metadata"].(map[string]any); ok {
				kept := make(map[string]any, len(workloadIdentity))
				for _, k := range workloadIdentity {
					if v, found := meta[k]; found {
						kept[k] = v
					}
				}
				o.Object["metadata"] = kept
			}
			dropTemplateIfSelected(o)
		case client.Object: // the typed built-in kinds kit.TrimmedWorkloads caches
			o.SetGenerateName("")
			o.SetSelfLink("")
			o.SetCreationTimestamp(metav1.Time{})
			o.SetDeletionGracePeriodSeconds(nil)
			o.SetLabels(nil)
			o.SetAnnotations(nil)
			o.SetOwnerReferences(nil)
			o.SetFinalizers(nil)
			o.SetManagedFields(nil)
			if tmpl, sel := typedTemplateAndSelector(o); tmpl != nil && sel != nil && !resources.IsEmptySelector(*sel) {
				*tmpl = corev1.PodTemplateSpec{}
			}
		}
		return out, nil
	}
}

// typedTemplateAndSelector returns the pod template and spec.selector of a typed built-in workload
// whose spec.selector selects its pods (resources.WorkloadPodSelector), nil for a CronJob (its
// template's labels select the pods) and for any other object.
func typedTemplateAndSelector(obj client.Object) (*corev1.PodTemplateSpec, *metav1.LabelSelector) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template, o.Spec.Selector
	case *appsv1.StatefulSet:
		return &o.Spec.Template, o.Spec.Selector
	case *appsv1.DaemonSet:
		return &o.Spec.Template, o.Spec.Selector
	case *appsv1.ReplicaSet:
		return &o.Spec.Template, o.Spec.Selector
	case *batchv1.Job:
		return &o.Spec.Template, o.Spec.Selector
	}
	return nil, nil
}

// dropTemplateIfSelected empties u's pod template when the pod selector netpol derives from u
// stays the same without it.
func dropTemplateIfSelected(u *unstructured.Unstructured) {
	w, err := duck.NewWorkload(u)
	if err != nil {
		return
	}
	want, err := resources.WorkloadPodSelector(w)
	if err != nil {
		return
	}
	path := w.TemplatePath()
	tmpl, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	if err := unstructured.SetNestedField(u.Object, map[string]any{}, path...); err != nil {
		return
	}
	if got, err := resources.WorkloadPodSelector(w); err != nil || !equality.Semantic.DeepEqual(got, want) {
		_ = unstructured.SetNestedField(u.Object, tmpl, path...) // the template's labels select the pods
	}
}

// templateLabelsOnly is the part of a pod template netpol reads.
func templateLabelsOnly(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: t.Labels}}
}

// Setup registers netpol with mgr. The controller itself starts once the AgentCard CRD is served:
// until then the manager runs, logs that it is waiting, and its readiness check
// "agentcard-crd" fails with a message saying so (no crash loop).
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.CRDPollInterval <= 0 {
		opts.CRDPollInterval = 10 * time.Second
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if !mgr.GetScheme().Recognizes(view.AgentCardGVK) {
		return errors.New("the manager's scheme lacks netpol's AgentCard status type: call view.AddToScheme on it")
	}
	w := &crdWaiter{mgr: mgr, opts: opts}
	if err := mgr.Add(w); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("agentcard-crd", w.Check)
}

// crdWaiter polls the RESTMapper (which re-discovers a group version on a miss) for AgentCard and
// starts the controller when it appears.
type crdWaiter struct {
	mgr     ctrl.Manager
	opts    Options
	started atomic.Bool
}

var _ manager.LeaderElectionRunnable = &crdWaiter{}

// NeedLeaderElection is false: every replica waits, so every replica is ready once the CRD exists;
// the controller it registers is itself leader-elected.
func (w *crdWaiter) NeedLeaderElection() bool { return false }

func (w *crdWaiter) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("netpol")
	warned := false
	for {
		_, err := w.mgr.GetRESTMapper().RESTMapping(view.AgentCardGVK.GroupKind(), view.AgentCardGVK.Version)
		if err == nil {
			if err := setupController(ctx, w.mgr, w.opts); err != nil {
				return fmt.Errorf("starting the AgentCard NetworkPolicy controller: %w", err)
			}
			w.started.Store(true)
			log.Info("AgentCard CRD found; NetworkPolicy controller started", "mode", w.opts.Mode)
			<-ctx.Done()
			return nil
		}
		if !warned {
			log.Info("waiting for the AgentCard CRD (agentcards.kagenti.io/v1alpha1) to be installed; no NetworkPolicies are managed until then",
				"pollInterval", w.opts.CRDPollInterval.String(), "reason", err.Error())
			warned = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.opts.CRDPollInterval):
		}
	}
}

// Check is the readiness check: ready once the controller runs.
func (w *crdWaiter) Check(*http.Request) error {
	if w.started.Load() {
		return nil
	}
	return errors.New("the AgentCard CRD (agentcards.kagenti.io/v1alpha1) is not installed; waiting for it")
}

var _ healthz.Checker = (&crdWaiter{}).Check

func setupController(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	// The manager's default client reads unstructured objects from the API server; netpol reads
	// AgentCards and workloads unstructured, so it uses a client that caches them too.
	c, err := client.New(mgr.GetConfig(), client.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		Cache: &client.CacheOptions{Reader: mgr.GetCache(), Unstructured: true},
	})
	if err != nil {
		return err
	}
	if err := indexFields(ctx, mgr); err != nil {
		return err
	}
	r := newReconciler(mgr, c, opts)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("agentcard-networkpolicy").
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
		For(view.NewAgentCard()).
		Owns(&networkingv1.NetworkPolicy{})
	for _, gvk := range duck.BuiltinKinds() {
		// Typed, as the resolver reads them (duck.NewManagerResolver): one informer per kind.
		b = b.Watches(duck.NewBuiltinObject(gvk), duck.EnqueueReferrers(c, gvk.GroupKind(), func() client.ObjectList { return view.NewAgentCardList() }),
			// The pod selector only changes with the spec (generation); creation and deletion count too.
			builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	}
	return b.Complete(r)
}

// newReconciler is netpol's reconciler on mgr; c reads through the manager's cache, unstructured
// objects included.
func newReconciler(mgr ctrl.Manager, c client.Client, opts Options) *Reconciler {
	events := mgr.GetEventRecorder(api.Name)
	return &Reconciler{
		Client: c,
		Policies: &kit.Applier{
			Client:    client.WithFieldOwner(c, api.Name),
			APIReader: mgr.GetAPIReader(),
			Scheme:    mgr.GetScheme(),
			ManagedBy: api.Name,
		},
		Resolver: duck.NewManagerResolver(mgr),
		Recorder: events,
		Status: &duck.StatusApplier{
			Client: c, FieldOwner: api.Name, Recorder: events,
			Conditions: []string{api.ConditionNetworkPolicyReady}, ConditionsOnly: true,
		},
		Mode:   opts.Mode,
		Policy: opts.Policy,
	}
}

// policyCardIndex indexes the cached NetworkPolicies by the name of their controlling AgentCard.
const policyCardIndex = "netpol.kagenti.io/controlling-agentcard"

// indexFields registers the cache indexes the reconciler lists by: AgentCards by target workload
// (a workload event finds its cards) and policies by controlling card (a card finds its policies).
func indexFields(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, view.NewAgentCard(), duck.TargetRefIndex, cardTargetKey); err != nil {
		return fmt.Errorf("indexing AgentCards by spec.targetRef: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &networkingv1.NetworkPolicy{}, policyCardIndex, controllingCard); err != nil {
		return fmt.Errorf("indexing NetworkPolicies by their AgentCard: %w", err)
	}
	return nil
}

// controllingCard is the policyCardIndex value of a NetworkPolicy: the name of the AgentCard
// controlling it, if one does.
func controllingCard(o client.Object) []string {
	owner := metav1.GetControllerOfNoCopy(o)
	if owner == nil || owner.Kind != view.AgentCardGVK.Kind || owner.APIVersion != view.GroupVersion.String() {
		return nil
	}
	return []string{owner.Name}
}

// cardTargetKey is the TargetRefIndex value of an unstructured AgentCard.
func cardTargetKey(o client.Object) []string {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	card, err := view.FromUnstructured(u)
	if err != nil || card.TargetRef == nil {
		return nil
	}
	gvk, err := card.TargetRef.GroupVersionKind()
	if err != nil {
		return nil
	}
	return []string{duck.TargetKey(gvk.GroupKind(), card.TargetRef.Name)}
}
