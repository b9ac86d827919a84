package duck

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Resolver turns a TargetRef into a Workload. Reader may be a cached client (the manager's) or a
// direct one; Mapper tells which kinds the API server serves and whether they are namespaced.
type Resolver struct {
	Reader client.Reader
	Mapper meta.RESTMapper
}

// NewResolver returns a Resolver reading through c and mapping kinds with c's RESTMapper.
func NewResolver(c client.Client) *Resolver { return &Resolver{Reader: c, Mapper: c.RESTMapper()} }

// Resolve reads the workload ref names in namespace. Errors are *Error with reason
// TargetNotFound, UnsupportedKind or InvalidTargetRef; other errors are transient API failures.
func (r *Resolver) Resolve(ctx context.Context, namespace string, ref TargetRef) (*Workload, error) {
	gvk, err := ref.GroupVersionKind()
	if err != nil {
		return nil, newError(ReasonInvalidTargetRef, err, "targetRef: %v", err)
	}
	mapping, err := r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil, newError(ReasonUnsupportedKind, err, "kind %s is not served by the API server", ref.kindString(gvk.Group))
		}
		return nil, fmt.Errorf("mapping %s: %w", gvk, err)
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return nil, newError(ReasonUnsupportedKind, nil, "kind %s is cluster-scoped; a workload must be namespaced", ref.kindString(gvk.Group))
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := r.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, newError(ReasonTargetNotFound, err, "%s %q not found in namespace %q", gvk.Kind, ref.Name, namespace)
		}
		return nil, err
	}
	return NewWorkload(u)
}

func (r TargetRef) kindString(group string) string {
	if group == "" {
		return r.Kind
	}
	return r.Kind + "." + group
}
