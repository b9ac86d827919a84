package kit

import (
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kagenti/platform/pkg/duck"
)

// WorkloadWatches watches a built-in workload kind from the first reconcile of a referrer that
// targets it, not from the start: each watch is an informer caching every object of its kind in
// the cluster (ReplicaSets: up to ten per Deployment; Jobs: one per CronJob run), which a cluster
// whose referrers target only Deployments never reads. An informer started late replays what it
// holds to the handler, so a workload created before the watch still reaches its referrers.
type WorkloadWatches struct {
	// Controller is the referrers' controller; Cache the manager's cache, whose typed informers
	// the resolver reads (duck.NewManagerResolver); Client the reader duck.EnqueueReferrers lists with.
	Controller controller.Controller
	Cache      cache.Cache
	Client     client.Reader
	// NewList returns an empty list of the referrer type.
	NewList func() client.ObjectList

	mu      sync.Mutex
	watched map[schema.GroupKind]bool
}

// Ensure starts the watch of ref's kind when it is a built-in workload kind not watched yet. Other
// kinds are read from the API server (NewManagerResolver) and not watched; an invalid reference is
// the resolver's to report. Call it before resolving ref, so a target missing now is seen when it
// appears.
func (w *WorkloadWatches) Ensure(ref duck.TargetRef) error {
	gvk, err := ref.GroupVersionKind()
	if err != nil || !slices.Contains(duck.BuiltinKinds(), gvk) {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watched[gvk.GroupKind()] {
		return nil
	}
	// Typed, as the resolver reads them: one informer per kind.
	if err := w.Controller.Watch(source.Kind[client.Object](w.Cache, duck.NewBuiltinObject(gvk), duck.EnqueueReferrers(w.Client, gvk.GroupKind(), w.NewList))); err != nil {
		return fmt.Errorf("watching %s: %w", gvk.Kind, err)
	}
	if w.watched == nil {
		w.watched = map[schema.GroupKind]bool{}
	}
	w.watched[gvk.GroupKind()] = true
	return nil
}
