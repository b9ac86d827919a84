// Package controller wires this pillar's reconcilers into a controller-runtime manager.
package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/metrics"
	"github.com/kagenti/platform/agentcard/internal/resources"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// Options are the pillar-specific settings taken from the command line.
type Options struct {
	// RequireSignature is the default of spec.requireSignature.
	RequireSignature bool
	// TrustBundleConfigMap is "namespace/name" of the SPIRE trust bundle ConfigMap; empty disables verification.
	TrustBundleConfigMap string
	// TrustBundleKey is the key holding the bundle (PEM or SPIFFE JSON).
	TrustBundleKey string
	// TrustDomain is the default SPIFFE trust domain.
	TrustDomain string
	// MaxConcurrentFetches bounds card fetches in flight across all AgentCards.
	MaxConcurrentFetches int
	// FetchTimeout bounds one fetch.
	FetchTimeout time.Duration
	// MaxConcurrentReconciles of the AgentCard controller.
	MaxConcurrentReconciles int
	// AutoCreate enables AgentCardSync.
	AutoCreate bool
	// CrossNamespaceIdentities are SPIFFE ID patterns an AgentCard of any namespace may bind
	// (signature.IdentityRules); empty: only identities of the AgentCard's own namespace.
	CrossNamespaceIdentities []string
	// MaxCachedCardBytes bounds the cards kept between syncs (cardStore).
	MaxCachedCardBytes int
	// Namespaces are the namespaces whose pods are watched, as the manager's cache watches them;
	// empty: all.
	Namespaces []string
}

// Validate reports bad values by flag name.
func (o Options) Validate() error {
	if err := (signature.IdentityRules{CrossNamespace: o.CrossNamespaceIdentities}).Validate(); err != nil {
		return fmt.Errorf("--cross-namespace-identities: %w", err)
	}
	return nil
}

// Defaults fills unset options.
func (o *Options) Defaults() {
	if o.TrustBundleKey == "" {
		o.TrustBundleKey = "bundle.crt"
	}
	if o.TrustDomain == "" {
		o.TrustDomain = "cluster.local"
	}
	if o.MaxConcurrentFetches <= 0 {
		o.MaxConcurrentFetches = 64
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = 5 * time.Second
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = 16
	}
	if o.MaxCachedCardBytes <= 0 {
		o.MaxCachedCardBytes = DefaultMaxCachedCardBytes
	}
}

// Setup registers the pillar's reconcilers, indexes and watches with mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	opts.Defaults()
	if err := opts.Validate(); err != nil {
		return err
	}
	ctx := context.Background()
	// Namespaced only: every lookup (duck.EnqueueReferrers, userCardFor) names the workload's namespace.
	if err := kit.IndexTargetRefInNamespace(ctx, mgr.GetCache(), &v1alpha1.AgentCard{}); err != nil {
		return err
	}
	pods, err := kit.NewSlimPods(mgr, opts.Namespaces, podFrom, podIndexes)
	if err != nil {
		return err
	}
	trust := &TrustStore{}
	metrics.SetBundleClock(trust.LoadedAt)
	verified := newVerifiedPods()
	r := &CardReconciler{
		Client:   mgr.GetClient(),
		Pods:     pods,
		Resolver: duck.NewManagerResolver(mgr),
		Fetcher:  fetch.New(opts.MaxConcurrentFetches, opts.FetchTimeout),
		Trust:    trust,
		Status: &duck.StatusApplier{
			Client: mgr.GetClient(), FieldOwner: FieldManager, Recorder: mgr.GetEventRecorder(FieldManager),
			Conditions: resources.CardConditions,
		},
		Verified:         verified,
		Identities:       signature.IdentityRules{CrossNamespace: opts.CrossNamespaceIdentities},
		RequireSignature: opts.RequireSignature,
		TrustDomain:      opts.TrustDomain,
		cards:            newCardStore(opts.MaxCachedCardBytes),
	}
	metrics.SetCardCacheSize(func() float64 { return float64(r.cards.size()) })
	rotations := make(chan event.TypedGenericEvent[client.Object], 16)
	if opts.TrustBundleConfigMap != "" {
		ns, name, ok := strings.Cut(opts.TrustBundleConfigMap, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("--trust-bundle-configmap must be namespace/name, got %q", opts.TrustBundleConfigMap)
		}
		bw, err := NewBundleWatcher(mgr.GetConfig(), mgr.GetClient(), types.NamespacedName{Namespace: ns, Name: name}, opts.TrustBundleKey, opts.TrustDomain, trust, rotations)
		if err != nil {
			return err
		}
		if err := mgr.Add(bw); err != nil {
			return err
		}
	}

	b := ctrl.NewControllerManagedBy(mgr).
		Named("agentcard").
		For(&v1alpha1.AgentCard{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		WatchesRawSource(source.Channel(rotations, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles})
	cardsOfPod := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o *pod) []reconcile.Request {
		var reqs []reconcile.Request
		for _, k := range r.cardsSelecting(o.GetNamespace(), o.GetLabels()) {
			reqs = append(reqs, reconcile.Request{NamespacedName: k})
		}
		return reqs
	})
	b = b.WatchesRawSource(pods.Source(cardsOfPod, podChanged()))
	for _, gvk := range AutoCreateKinds {
		// Typed, as the resolver reads them (duck.NewManagerResolver): one informer per kind.
		b = b.Watches(duck.NewBuiltinObject(gvk), duck.EnqueueReferrers(mgr.GetClient(), gvk.GroupKind(), func() client.ObjectList { return &v1alpha1.AgentCardList{} }),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{})))
	}
	if err := b.Complete(r); err != nil {
		return err
	}
	guard := &LabelGuard{Client: mgr.GetClient(), Pods: pods, Verified: verified, Recorder: mgr.GetEventRecorder(FieldManager), Retry: 2 * time.Second}
	gb := ctrl.NewControllerManagedBy(mgr).Named("agentcard-label-guard")
	gb = gb.WatchesRawSource(pods.Source(&handler.TypedEnqueueRequestForObject[*pod]{}, labelledVerified()))
	if err := gb.Complete(guard); err != nil {
		return err
	}

	if opts.AutoCreate {
		for _, gvk := range AutoCreateKinds {
			if err := setupSync(mgr, gvk); err != nil {
				return err
			}
		}
	}
	return nil
}

func setupSync(mgr ctrl.Manager, gvk schema.GroupVersionKind) error {
	sr := &SyncReconciler{Client: mgr.GetClient(), GVK: gvk, Recorder: mgr.GetEventRecorder(FieldManager)}
	return ctrl.NewControllerManagedBy(mgr).
		Named("agentcardsync-"+strings.ToLower(gvk.Kind)).
		For(duck.NewBuiltinObject(gvk), builder.WithPredicates(predicate.Or(predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// A user's AgentCard appearing or disappearing for a workload re-evaluates the workload.
		Watches(&v1alpha1.AgentCard{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			c := o.(*v1alpha1.AgentCard)
			ref := c.Spec.TargetRef
			if ref == nil {
				return nil
			}
			g, err := ref.GroupVersionKind()
			if err != nil || g.GroupKind() != gvk.GroupKind() {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: ref.Name}}}
		}), builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		Complete(sr)
}

// podChanged passes pod events that change what a sync sees: IP, readiness, phase, deletion and
// labels other than the one this controller writes (so labelling a pod does not trigger a sync).
func podChanged() predicate.TypedPredicate[*pod] {
	return predicate.TypedFuncs[*pod]{UpdateFunc: func(e event.TypedUpdateEvent[*pod]) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return o.Serving != n.Serving || o.IP != n.IP ||
			!n.DeletionTimestamp.Equal(o.DeletionTimestamp) || !sameLabelsExceptOurs(o.Labels, n.Labels)
	}}
}

// labelledVerified passes pods that carry kagenti.io/signature-verified=true (the LabelGuard judges them).
func labelledVerified() predicate.TypedPredicate[*pod] {
	return predicate.NewTypedPredicateFuncs(func(p *pod) bool {
		return p.Labels[v1alpha1.LabelSignatureVerified] == "true"
	})
}

func sameLabelsExceptOurs(a, b map[string]string) bool {
	count := func(m map[string]string) int {
		n := len(m)
		if _, ok := m[v1alpha1.LabelSignatureVerified]; ok {
			n--
		}
		return n
	}
	if count(a) != count(b) {
		return false
	}
	for k, v := range a {
		if k != v1alpha1.LabelSignatureVerified && b[k] != v {
			return false
		}
	}
	return true
}
