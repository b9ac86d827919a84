package controller

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kagenti/platform/pkg/duck"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/tekton"
)

// brokenDiscovery is a RESTMapper whose every lookup fails as when the API server is unreachable.
type brokenDiscovery struct{ meta.RESTMapper }

func (brokenDiscovery) RESTMapping(schema.GroupKind, ...string) (*meta.RESTMapping, error) {
	return nil, errors.New("the server is currently unable to handle the request")
}

// TestErrorBeforeAVerdictWritesNothing: a build Ready for generation 1 whose generation 2 cannot be
// reconciled (discovery fails) keeps its stored status, observedGeneration 1, so GitOps tools keep
// reading it as in progress instead of seeing generation 1's Ready presented as generation 2's.
func TestErrorBeforeAVerdictWritesNothing(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	require.NoError(t, tekton.AddToScheme(scheme))
	b := &v1alpha1.AgentBuild{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", Generation: 2}}
	b.Status.Observe(1)
	b.Status.MarkReady(v1alpha1.ReasonBuildSucceeded, "built r/a@sha256:…")
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(b).WithStatusSubresource(b).Build()
	r := &Reconciler{
		Client: c,
		Status: &duck.StatusApplier{Client: c, FieldOwner: fieldOwner},
		Tekton: &tektonWatch{mapper: brokenDiscovery{}},
	}
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
	require.Error(t, err)
	got := &v1alpha1.AgentBuild{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(b), got))
	assert.Equal(t, int64(1), got.Status.ObservedGeneration)
	assert.Equal(t, int64(1), got.Status.Condition(v1alpha1.ConditionReady).ObservedGeneration)
}
