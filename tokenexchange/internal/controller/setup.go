// Package controller reconciles TokenExchanges: it renders each into the ConfigMap
// {workload}-token-exchange and reports the workload's identity sidecars in the status.
package controller

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spiffe/go-spiffe/v2/workloadapi"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/kit"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idpclient"
	"github.com/kagenti/platform/tokenexchange/internal/registrar"
	"github.com/kagenti/platform/tokenexchange/internal/webhook"
)

// Name is the controller's name, field manager and managed-by value.
const Name = "kagenti-tokenexchange"

// Options are the pillar-specific settings taken from the command line.
type Options struct {
	// Namespaces are those watched (the manager's cache.Options.DefaultNamespaces, the
	// --namespaces flag); none: all. The pod informer (kit.SlimPods) runs beside the cache and
	// is told them here.
	Namespaces []string
	// Webhook, when set, serves the validating webhook on the manager's webhook server.
	Webhook *webhook.Options
	// MaxConcurrentReconciles is the number of TokenExchanges reconciled in parallel.
	MaxConcurrentReconciles int
	// PodStatusClient reads the identity sidecars' /status from the pod IPs (propagation.go);
	// nil: NewPodStatusClient.
	PodStatusClient *http.Client
	// RestartStartedWithoutContent evicts the pods that started before their ConfigMap existed
	// (restart.go; the --restart-pods-started-before-config flag).
	RestartStartedWithoutContent bool
	// RestartWindow: 0 is DefaultRestartWindow.
	RestartWindow time.Duration
	// RegistrarSocket is the SPIRE agent's Workload API (unix:///…) the controller gets its own
	// JWT SVIDs from, to register the clients of clientAuthentication jwtSVID; "" turns that off
	// (the --registrar-spiffe-socket flag).
	RegistrarSocket string
	// Registrar replaces the one RegistrarSocket would build (tests).
	Registrar *Registrar
}

// podTokenExchangeIndex indexes pods by the ConfigMap behind their token-exchange volume.
const podTokenExchangeIndex = "tokenexchange.podConfigMap"

func podTokenExchangeConfigMap(p *cachedPod) []string {
	if p.configMap == "" {
		return nil
	}
	return []string{p.configMap}
}

// Setup registers the reconciler, its index and watches (and the webhook) with mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	ctx := context.Background()
	// Every lookup through the target index names a namespace: it is kept namespaced only
	// (kit.IndexFieldInNamespace), half the entries of the manager's field indexer.
	if err := kit.IndexTargetRefInNamespace(ctx, mgr.GetCache(), &v1alpha1.TokenExchange{}); err != nil {
		return err
	}
	// Pods are kept as cachedPods in an informer of their own, not in the manager's cache, indexed
	// by the ConfigMap of their token-exchange volume: a reconcile reads its workload's pods, not
	// every pod of the namespace (which made a namespace's reconciles quadratic in its pods).
	pods, err := kit.NewSlimPods(mgr, opts.Namespaces, newCachedPod, map[string]kit.SlimPodIndexer[*cachedPod]{podTokenExchangeIndex: podTokenExchangeConfigMap})
	if err != nil {
		return err
	}
	events := mgr.GetEventRecorder(Name)
	r := &Reconciler{
		Client:   mgr.GetClient(),
		Resolver: duck.NewManagerResolver(mgr),
		Applier:  &kit.Applier{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), ManagedBy: Name},
		Status: &duck.StatusApplier{Client: mgr.GetClient(), FieldOwner: Name, Recorder: events, RequireCurrent: true,
			Conditions: []string{v1alpha1.ConditionTargetResolved, v1alpha1.ConditionConfigMapReady,
				v1alpha1.ConditionConfigPropagated, v1alpha1.ConditionStartupSettingsCurrent, v1alpha1.ConditionClientRegistered}},
		Recorder: events,
		Pods:     NewPodStatusProber(opts.PodStatusClient),
		PodCache: pods,

		RestartStartedWithoutContent: opts.RestartStartedWithoutContent,
		RestartWindow:                opts.RestartWindow,
		Registrar:                    opts.Registrar,
	}
	if r.Registrar == nil && opts.RegistrarSocket != "" {
		// The Workload API client connects on first use: a controller whose SPIRE agent is not up
		// yet starts anyway, and its jwtSVID TokenExchanges say why they wait.
		wl, err := workloadapi.New(ctx, workloadapi.WithAddr(opts.RegistrarSocket))
		if err != nil {
			return fmt.Errorf("--registrar-spiffe-socket %s: %w", opts.RegistrarSocket, err)
		}
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { <-ctx.Done(); return wl.Close() })); err != nil {
			return err
		}
		r.Registrar = &Registrar{Registrar: &registrar.Registrar{SVIDs: wl, HTTP: idpclient.New()}}
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = 4
	}
	newList := func() client.ObjectList { return &v1alpha1.TokenExchangeList{} }
	b := ctrl.NewControllerManagedBy(mgr).
		Named("tokenexchange").
		// Status-only writes (ours, or another manager's condition) need no reconcile.
		For(&v1alpha1.TokenExchange{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A TokenExchange appearing or going away changes who wins for its target: wake the others.
		Watches(&v1alpha1.TokenExchange{}, duck.EnqueueSameTarget(mgr.GetClient(), newList),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&corev1.ConfigMap{}).
		WatchesRawSource(pods.Source(handler.TypedEnqueueRequestsFromMapFunc(r.podReferrers))).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles})
	c, err := b.Build(r)
	if err != nil {
		return err
	}
	// The built-in workload kinds are watched from the first TokenExchange that targets each
	// (kit.WorkloadWatches): the resolver reads them from the same typed informers
	// (duck.NewManagerResolver), so a reconcile costs no API read of its workload, and a kind no
	// TokenExchange targets (ReplicaSets, Jobs) is not cached.
	r.Workloads = &kit.WorkloadWatches{Controller: c, Cache: mgr.GetCache(), Client: mgr.GetClient(), NewList: newList}
	if opts.Webhook != nil {
		return webhook.Setup(mgr, *opts.Webhook, mgr.GetLogger().WithName("webhook"))
	}
	return nil
}
