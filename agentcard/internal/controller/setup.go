// Package controller wires agentcard's reconcilers into a controller-runtime manager: the
// AgentCard reconciler (resolve the pods, sync their cards with cardsync, label them with
// podlabels, write the status built by status), the LabelGuard, the trust bundle watcher
// (verify) and AgentCardSync (autocreate), on the caches this package configures.
package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
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
	"github.com/kagenti/platform/agentcard/internal/autocreate"
	"github.com/kagenti/platform/agentcard/internal/cardsync"
	"github.com/kagenti/platform/agentcard/internal/federation/tlsid"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/metrics"
	"github.com/kagenti/platform/agentcard/internal/podcache"
	"github.com/kagenti/platform/agentcard/internal/podlabels"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/status"
	"github.com/kagenti/platform/agentcard/internal/verify"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// DefaultMaxCachedCardBytes is the default of --max-cached-card-bytes.
const DefaultMaxCachedCardBytes = cardsync.DefaultMaxCachedCardBytes

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
	// MaxCachedCardBytes bounds the cards kept between syncs (cardsync).
	MaxCachedCardBytes int
	// The controller's own X.509-SVID for fetching https cards over mutual TLS (the pod must prove
	// the identity its card is bound to): the SPIRE Workload API socket, or certificate files and
	// the trust bundle of --trust-domain. None: https cards are fetched without authentication.
	FetchSPIFFESocket, FetchCertFile, FetchKeyFile, FetchBundleFile string
	// Namespaces are the namespaces whose pods are watched, as the manager's cache watches them;
	// empty: all.
	Namespaces []string
}

// Validate reports bad values by flag name.
func (o Options) Validate() error {
	if err := (signature.IdentityRules{CrossNamespace: o.CrossNamespaceIdentities}).Validate(); err != nil {
		return fmt.Errorf("--cross-namespace-identities: %w", err)
	}
	files := o.FetchCertFile != "" || o.FetchKeyFile != "" || o.FetchBundleFile != ""
	switch {
	case o.FetchSPIFFESocket != "" && files:
		return errors.New("--fetch-spiffe-socket and --fetch-cert-file/--fetch-key-file/--fetch-bundle-file: give one identity")
	case files && (o.FetchCertFile == "" || o.FetchKeyFile == "" || o.FetchBundleFile == ""):
		return errors.New("--fetch-cert-file, --fetch-key-file and --fetch-bundle-file go together")
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
	pods, err := kit.NewSlimPods(mgr, opts.Namespaces, podcache.From, podcache.Indexes)
	if err != nil {
		return err
	}
	trust := &verify.TrustStore{}
	metrics.SetBundleClock(trust.LoadedAt)
	granted := podlabels.NewGrants()
	fetcher := fetch.New(opts.MaxConcurrentFetches, opts.FetchTimeout)
	switch {
	case opts.FetchSPIFFESocket != "":
		src, err := tlsid.FromWorkloadAPI(context.Background(), opts.FetchSPIFFESocket)
		if err != nil {
			return fmt.Errorf("--fetch-spiffe-socket: %w", err)
		}
		fetcher.WithAttestation(&fetch.Attestation{SVID: src.SVID, Bundles: src.Bundles})
	case opts.FetchCertFile != "":
		td, err := spiffeid.TrustDomainFromString(opts.TrustDomain)
		if err != nil {
			return fmt.Errorf("--trust-domain %q: %w", opts.TrustDomain, err)
		}
		src := tlsid.FromFiles(opts.FetchCertFile, opts.FetchKeyFile, td, opts.FetchBundleFile)
		fetcher.WithAttestation(&fetch.Attestation{SVID: src.SVID, Bundles: src.Bundles})
	}
	cards := cardsync.NewSyncer(fetcher, trust,
		signature.IdentityRules{CrossNamespace: opts.CrossNamespaceIdentities}, opts.TrustDomain, opts.MaxCachedCardBytes)
	r := &CardReconciler{
		Client:   mgr.GetClient(),
		Pods:     pods,
		Resolver: duck.NewManagerResolver(mgr),
		Cards:    cards,
		Status: &duck.StatusApplier{
			Client: mgr.GetClient(), FieldOwner: FieldManager, Recorder: mgr.GetEventRecorder(FieldManager),
			Conditions: status.CardConditions,
		},
		Labels:           &podlabels.Labeller{Client: mgr.GetClient(), Pods: pods, Granted: granted},
		RequireSignature: opts.RequireSignature,
	}
	metrics.SetCardCacheSize(func() float64 { return float64(cards.CachedBytes()) })
	rotations := make(chan event.TypedGenericEvent[client.Object], 16)
	if opts.TrustBundleConfigMap != "" {
		ns, name, ok := strings.Cut(opts.TrustBundleConfigMap, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("--trust-bundle-configmap must be namespace/name, got %q", opts.TrustBundleConfigMap)
		}
		bw, err := verify.NewBundleWatcher(mgr.GetConfig(), mgr.GetClient(), types.NamespacedName{Namespace: ns, Name: name}, opts.TrustBundleKey, opts.TrustDomain, trust, rotations)
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
	cardsOfPod := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o *podcache.Pod) []reconcile.Request {
		var reqs []reconcile.Request
		for _, k := range r.cardsSelecting(o.GetNamespace(), o.GetLabels()) {
			reqs = append(reqs, reconcile.Request{NamespacedName: k})
		}
		return reqs
	})
	b = b.WatchesRawSource(pods.Source(cardsOfPod, podChanged()))
	for _, gvk := range autocreate.Kinds {
		// Typed, as the resolver reads them (duck.NewManagerResolver): one informer per kind.
		b = b.Watches(duck.NewBuiltinObject(gvk), duck.EnqueueReferrers(mgr.GetClient(), gvk.GroupKind(), func() client.ObjectList { return &v1alpha1.AgentCardList{} }),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{})))
	}
	if err := b.Complete(r); err != nil {
		return err
	}
	guard := &podlabels.LabelGuard{Client: mgr.GetClient(), Pods: pods, Verified: granted, Recorder: mgr.GetEventRecorder(FieldManager), Retry: 2 * time.Second}
	gb := ctrl.NewControllerManagedBy(mgr).Named("agentcard-label-guard")
	gb = gb.WatchesRawSource(pods.Source(&handler.TypedEnqueueRequestForObject[*podcache.Pod]{}, podlabels.LabelledVerified()))
	if err := gb.Complete(guard); err != nil {
		return err
	}

	if opts.AutoCreate {
		return autocreate.Setup(mgr, FieldManager)
	}
	return nil
}

// podChanged passes pod events that change what a sync sees: IP, readiness, phase, deletion and
// labels other than the one this controller writes (so labelling a pod does not trigger a sync).
func podChanged() predicate.TypedPredicate[*podcache.Pod] {
	return predicate.TypedFuncs[*podcache.Pod]{UpdateFunc: func(e event.TypedUpdateEvent[*podcache.Pod]) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return o.Serving != n.Serving || o.IP != n.IP ||
			!n.DeletionTimestamp.Equal(o.DeletionTimestamp) || !podlabels.SameExceptOurs(o.Labels, n.Labels)
	}}
}
