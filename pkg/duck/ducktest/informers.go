package ducktest

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// RecordInformers makes the cache built from opts record the kind of every informer it starts
// for one of kinds, and returns the kinds started so far, sorted. Tests of lazily started workload
// watches count informers with it (kinds: duck.BuiltinKinds(); this package cannot import duck,
// whose own tests import it).
func RecordInformers(opts *cache.Options, scheme *runtime.Scheme, kinds []schema.GroupVersionKind) func() []string {
	var mu sync.Mutex
	started := map[string]bool{}
	opts.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		if gvk, err := apiutil.GVKForObject(obj, scheme); err == nil && slices.Contains(kinds, gvk) {
			mu.Lock()
			started[gvk.Kind] = true
			mu.Unlock()
		}
		return toolscache.NewSharedIndexInformer(lw, obj, resync, idx)
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		kinds := make([]string, 0, len(started))
		for k := range started {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		return kinds
	}
}
