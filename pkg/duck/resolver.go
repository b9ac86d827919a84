package duck

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
)

// Resolver turns a TargetRef into a Workload. Reader may be a cached client (the manager's) or a
// direct one; Mapper tells which kinds the API server serves and whether they are namespaced.
type Resolver struct {
	Reader client.Reader
	Mapper meta.RESTMapper
}

// NewResolver returns a Resolver reading through c and mapping kinds with c's RESTMapper. Note that
// a manager's default client reads unstructured objects from the API server, not its cache: a
// controller should use NewManagerResolver.
func NewResolver(c client.Client) *Resolver { return &Resolver{Reader: c, Mapper: c.RESTMapper()} }

// NewManagerResolver returns the Resolver a controller run by mgr wants on its hot path: the built-in
// kinds, which a referrer controller watches anyway (EnqueueReferrers), are read from mgr's
// informer cache; any other kind straight from the API server, so a custom kind never starts an
// informer the controller may have no RBAC to list and watch.
func NewManagerResolver(mgr cluster.Cluster) *Resolver {
	return &Resolver{Reader: &builtinCachedReader{cached: mgr.GetCache(), live: mgr.GetAPIReader()}, Mapper: mgr.GetRESTMapper()}
}

type builtinCachedReader struct{ cached, live client.Reader }

// Get reads a built-in workload from the cache's typed informer of its kind (the one
// TrimmedWorkloads configures and the controller's watches of NewBuiltinObject start), also when
// obj is unstructured: reading it as unstructured would start a second informer of the kind.
func (r *builtinCachedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if !isBuiltin(gvk) {
		return r.live.Get(ctx, key, obj, opts...)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return r.cached.Get(ctx, key, obj, opts...)
	}
	typed := NewBuiltinObject(gvk)
	if err := r.cached.Get(ctx, key, typed, opts...); err != nil {
		return err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		return fmt.Errorf("converting %s %s: %w", gvk.Kind, key, err)
	}
	// The cache keeps no status (TrimWorkload): leave out the zero values of its non-optional
	// fields, so nothing reads them as the workload's state.
	delete(m, "status")
	u.Object = m
	u.SetGroupVersionKind(gvk)
	return nil
}

func (r *builtinCachedReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.live.List(ctx, list, opts...)
}

func isBuiltin(gvk schema.GroupVersionKind) bool {
	gv, ok := builtinKinds[gvk.Kind]
	return ok && gv == gvk.GroupVersion()
}

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
