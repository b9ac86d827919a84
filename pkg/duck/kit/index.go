package kit

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/duck"
)

// IndexFieldInNamespace registers field on obj's informer in c, like client.FieldIndexer.IndexField,
// but keeps each value of a namespaced object only under its namespace. IndexField also keeps a
// cluster-wide copy of every value ("__all_namespaces/<value>"), for Lists that name no namespace;
// for an index whose lookups always name one that copy doubles the index (each value one more key
// and one more set in the informer's indexer: ≈ 1 MB at 1,000 objects × 3 indexes).
//
// A List through such an index must name a namespace (client.InNamespace): without one it matches
// nothing. The index name and keys are those controller-runtime's cache reader looks up
// ("field:<field>", "<namespace>/<value>"); TestIndexFieldInNamespace checks them against it.
func IndexFieldInNamespace(ctx context.Context, c cache.Informers, obj client.Object, field string, extract client.IndexerFunc) error {
	informer, err := c.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("indexing %s: %w", field, err)
	}
	return informer.AddIndexers(toolscache.Indexers{"field:" + field: func(raw any) ([]string, error) {
		o, ok := raw.(client.Object)
		if !ok {
			return nil, fmt.Errorf("indexing %s: %T is not a client.Object", field, raw)
		}
		ns := o.GetNamespace()
		if ns == "" {
			ns = "__all_namespaces" // a cluster-scoped object: the key a List without namespace asks for
		}
		vals := extract(o)
		keys := make([]string, len(vals))
		for i, v := range vals {
			keys[i] = ns + "/" + v
		}
		return keys, nil
	}})
}

// IndexTargetRefInNamespace registers duck.TargetRefIndex for obj's type (a duck.Referrer) like
// duck.IndexTargetRef, namespaced only (IndexFieldInNamespace): ReferrerRequests and the reconcilers
// always look referrers up in their workload's namespace.
func IndexTargetRefInNamespace(ctx context.Context, c cache.Informers, obj duck.Referrer) error {
	return IndexFieldInNamespace(ctx, c, obj, duck.TargetRefIndex, duck.TargetRefKeys)
}
