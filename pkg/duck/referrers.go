package duck

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TargetRefIndex is the field index on spec.targetRef that maps a workload to the objects that
// reference it. Its values are TargetKey(group, kind, name).
const TargetRefIndex = "spec.targetRef"

// Referrer is an object that may reference a workload. GetTargetRef returns nil when it does not
// (e.g. an AgentCard in selector mode).
type Referrer interface {
	client.Object
	GetTargetRef() *TargetRef
}

// TargetKey is the index value for a workload: the version is left out so a reference through any
// served version finds the same workload.
func TargetKey(gk schema.GroupKind, name string) string {
	return gk.Kind + "." + gk.Group + "/" + name
}

// IndexTargetRef registers TargetRefIndex for obj's type (a Referrer) with the manager's indexer.
func IndexTargetRef(ctx context.Context, indexer client.FieldIndexer, obj Referrer) error {
	return indexer.IndexField(ctx, obj, TargetRefIndex, TargetRefKeys)
}

// TargetRefKeys are the values of TargetRefIndex for o: the TargetKey of the workload it references,
// none when it is not a Referrer or references nothing.
func TargetRefKeys(o client.Object) []string {
	r, ok := o.(Referrer)
	if !ok || r.GetTargetRef() == nil {
		return nil
	}
	ref := *r.GetTargetRef()
	gvk, err := ref.GroupVersionKind()
	if err != nil {
		return nil
	}
	return []string{TargetKey(gvk.GroupKind(), ref.Name)}
}

// EnqueueReferrers maps an event on a workload of kind gk to reconcile requests for every object
// of newList's type in the workload's namespace whose spec.targetRef names it. Use it to watch the
// target kinds, so a referrer recovers as soon as its workload appears or changes.
func EnqueueReferrers(c client.Reader, gk schema.GroupKind, newList func() client.ObjectList) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, workload client.Object) []reconcile.Request {
		return ReferrerRequests(ctx, c, gk, workload, newList())
	})
}

// ReferrerRequests lists the referrers of workload (of kind gk) into list and returns their requests.
func ReferrerRequests(ctx context.Context, c client.Reader, gk schema.GroupKind, workload client.Object, list client.ObjectList) []reconcile.Request {
	referrers, err := listReferrers(ctx, c, workload.GetNamespace(), TargetKey(gk, workload.GetName()), list)
	if err != nil {
		log.FromContext(ctx).Error(err, "listing referrers", "workload", workload.GetName(), "kind", gk.String())
		return nil
	}
	reqs := make([]reconcile.Request, len(referrers))
	for i, o := range referrers {
		reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)}
	}
	return reqs
}

// listReferrers lists into list the objects in namespace whose spec.targetRef has the TargetKey key.
func listReferrers(ctx context.Context, c client.Reader, namespace, key string, list client.ObjectList) ([]client.Object, error) {
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{TargetRefIndex: key}); err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	objs := make([]client.Object, 0, len(items))
	for _, it := range items {
		if o, ok := it.(client.Object); ok {
			objs = append(objs, o)
		}
	}
	return objs, nil
}

// EnqueueSameTarget maps an event on a referrer to reconcile requests for the other objects of
// newList's type in its namespace that reference the same workload. Watch the referrers' own kind
// with it, so that a conflict resolves as soon as the referrer in effect goes away or moves to
// another workload.
func EnqueueSameTarget(c client.Reader, newList func() client.ObjectList) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		keys := TargetRefKeys(o)
		if len(keys) == 0 {
			return nil
		}
		referrers, err := listReferrers(ctx, c, o.GetNamespace(), keys[0], newList())
		if err != nil {
			log.FromContext(ctx).Error(err, "listing referrers of the same workload", "referrer", o.GetName())
			return nil
		}
		var reqs []reconcile.Request
		for _, r := range referrers {
			if r.GetName() != o.GetName() {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(r)})
			}
		}
		return reqs
	})
}

// ReferrerInEffectOf lists into list the objects of its type in self's namespace that reference
// self's workload and returns the one in effect among them and self (ReferrerInEffect): self when
// it references no workload.
func ReferrerInEffectOf(ctx context.Context, c client.Reader, self Referrer, list client.ObjectList) (client.Object, error) {
	keys := TargetRefKeys(self)
	if len(keys) == 0 {
		return self, nil
	}
	referrers, err := listReferrers(ctx, c, self.GetNamespace(), keys[0], list)
	if err != nil {
		return nil, fmt.Errorf("listing the referrers of %s: %w", *self.GetTargetRef(), err)
	}
	return ReferrerInEffect(self, referrers), nil
}

// ReferrerInEffect decides which of several objects that reference the same workload is in effect:
// the oldest by creation time, then by name. The others report a conflict and write nothing, so
// exactly one configures the workload whatever order they are reconciled in. self is always a
// candidate, even when a lagging cache has not listed it yet; other referrers being deleted are
// not. It returns self when self is in effect.
func ReferrerInEffect(self client.Object, referrers []client.Object) client.Object {
	winner := self
	for _, o := range referrers {
		if o.GetUID() == self.GetUID() || o.GetDeletionTimestamp() != nil {
			continue
		}
		if older(o, winner) {
			winner = o
		}
	}
	return winner
}

func older(a, b client.Object) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetName() < b.GetName()
}
