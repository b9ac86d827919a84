package kit

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/duck"
)

// gadget is pkg/duck's test kind (testdata/crds/gadgets.yaml): a status that is the shared model.
type gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            struct {
		duck.Status `json:",inline"`
	} `json:"status,omitempty"`
}

func (g *gadget) GetStatus() *duck.Status { return &g.Status.Status }

func (g *gadget) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	g.Status.Status.DeepCopyInto(&out.Status.Status)
	return &out
}

func init() {
	gv := schema.GroupVersion{Group: "test.kagenti.io", Version: "v1"}
	testScheme.AddKnownTypeWithName(gv.WithKind("Gadget"), &gadget{})
	metav1.AddToGroupVersion(testScheme, gv)
}

// TestStatusReconcilerWritesVerdictsAndKeepsTheStatusOnPlainErrors: the shell every status-reporting
// pillar runs (agenttrace, tokenexchange, agentbuild), on a real API server.
func TestStatusReconcilerWritesVerdictsAndKeepsTheStatusOnPlainErrors(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	ns := namespace(t, c, "status-reconciler")
	g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns}}
	require.NoError(t, c.Create(ctx, g))
	key := client.ObjectKeyFromObject(g)

	var gone []types.NamespacedName
	var body func(*gadget) (ctrl.Result, bool, error)
	shell := &StatusReconciler[*gadget]{Client: c,
		Status: &duck.StatusApplier{Client: c, FieldOwner: "kagenti-test", RequireCurrent: true},
		New:    func() *gadget { return &gadget{} },
		Gone:   func(k types.NamespacedName) { gone = append(gone, k) },
		Body: func(_ context.Context, desired *gadget) (ctrl.Result, bool, error) {
			return body(desired)
		}}
	stored := func() *gadget {
		got := &gadget{}
		require.NoError(t, c.Get(ctx, key, got))
		return got
	}

	// A verdict is written, with the Body's result.
	body = func(d *gadget) (ctrl.Result, bool, error) {
		d.Status.MarkReady("Configured", "ok")
		return ctrl.Result{RequeueAfter: 42}, true, nil
	}
	res, err := shell.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	require.NoError(t, err)
	assert.Equal(t, ctrl.Result{RequeueAfter: 42}, res)
	assert.True(t, stored().Status.IsReady())

	// An error without a verdict is returned and writes nothing.
	boom := errors.New("the API server is slow")
	body = func(d *gadget) (ctrl.Result, bool, error) {
		d.Status.MarkReconciling("Half", "half done")
		return ctrl.Result{}, false, boom
	}
	_, err = shell.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	assert.ErrorIs(t, err, boom)
	assert.True(t, stored().Status.IsReady(), "the stored status keeps saying what it said")

	// An error with a verdict is written, then returned for a retry.
	body = func(d *gadget) (ctrl.Result, bool, error) {
		d.Status.MarkStalled("ApplyFailed", "the ConfigMap could not be written")
		return ctrl.Result{}, true, boom
	}
	_, err = shell.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, "ApplyFailed", stored().Status.Condition(duck.ConditionReady).Reason)

	// A deleted resource: Gone runs, no error, no Body.
	require.NoError(t, c.Delete(ctx, g))
	body = func(*gadget) (ctrl.Result, bool, error) {
		t.Fatal("Body ran for a deleted resource")
		return ctrl.Result{}, false, nil
	}
	_, err = shell.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	require.NoError(t, err)
	assert.Equal(t, []types.NamespacedName{key}, gone)
}
