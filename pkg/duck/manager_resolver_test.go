package duck

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// recordingReader remembers which kinds it was asked for: the kind of an unstructured object, the
// type of a typed one (e.g. *v1.Deployment).
type recordingReader struct{ kinds []string }

func (r *recordingReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		r.kinds = append(r.kinds, u.GetKind())
	} else {
		r.kinds = append(r.kinds, fmt.Sprintf("%T", obj))
	}
	return nil
}

func (r *recordingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	r.kinds = append(r.kinds, "list")
	return nil
}

func TestBuiltinCachedReaderRoutesByKind(t *testing.T) {
	cached, live := &recordingReader{}, &recordingReader{}
	r := &builtinCachedReader{cached: cached, live: live}
	for _, gvk := range append(BuiltinKinds(), gvkOf("Deployment").GroupVersion().WithKind("AgentSet"),
		customObject(true).GroupVersionKind()) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		require.NoError(t, r.Get(context.Background(), client.ObjectKey{Name: "x"}, u))
	}
	assert.Equal(t, []string{"*v1.Deployment", "*v1.StatefulSet", "*v1.DaemonSet", "*v1.ReplicaSet", "*v1.Job", "*v1.CronJob"}, cached.kinds,
		"built-in kinds come from the cache's typed informers (the ones TrimmedWorkloads trims), never an unstructured one")
	assert.Equal(t, []string{"AgentSet", "AgentSet"}, live.kinds,
		"other kinds (even one named like a built-in group) are read live, never starting an informer")
}
