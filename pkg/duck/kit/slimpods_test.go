package kit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// testSlimPod is a controller's own small type of a pod: the ConfigMap its first volume mounts and
// whether it runs.
type testSlimPod struct {
	metav1.ObjectMeta
	configMap string
	running   bool
}

func (p *testSlimPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (p *testSlimPod) DeepCopyObject() runtime.Object {
	c := *p
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

func newTestSlimPod(p *corev1.Pod) *testSlimPod {
	s := &testSlimPod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion},
		running: p.Status.Phase == corev1.PodRunning}
	if len(p.Spec.Volumes) > 0 && p.Spec.Volumes[0].ConfigMap != nil {
		s.configMap = p.Spec.Volumes[0].ConfigMap.Name
	}
	return s
}

// TestSlimPodsOnAPIServer runs SlimPods in a manager against a real API server: a pod that exists
// before the start, a pod created, changed and deleted later each reach the controller's handler
// as the small type (a deletion too, as the object and not a tombstone), the reconciler gets the
// requests the handler maps them to, and List finds them through the namespaced index only.
func TestSlimPodsOnAPIServer(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c, "slimpods")
	other := namespace(t, c, "slimpods-other")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pod := func(ns, name, cm string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "example.com/agent:v1"}},
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}}}}
	}
	early := pod(ns, "early", "cm-a")
	require.NoError(t, c.Create(ctx, early))
	require.NoError(t, c.Create(ctx, pod(other, "elsewhere", "cm-a")))

	mgr, err := ctrl.NewManager(testCfg, ctrl.Options{Scheme: testScheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}})
	require.NoError(t, err)
	byConfigMap := map[string]SlimPodIndexer[*testSlimPod]{
		"configMap": func(p *testSlimPod) []string {
			if p.configMap == "" {
				return nil
			}
			return []string{p.configMap}
		}}
	pods, err := NewSlimPods(mgr, nil, newTestSlimPod, byConfigMap)
	require.NoError(t, err)
	// A controller restricted to namespaces (--namespaces) watches pods there only.
	scoped, err := NewSlimPods(mgr, []string{ns}, newTestSlimPod, byConfigMap)
	require.NoError(t, err)

	events := make(chan string, 100)
	requests := make(chan string, 100)
	toRequest := func(p *testSlimPod) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "for-" + p.configMap}}
	}
	h := handler.TypedFuncs[*testSlimPod, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*testSlimPod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.Object.Namespace == ns {
				events <- "create " + e.Object.Name
				q.Add(toRequest(e.Object))
			}
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*testSlimPod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectNew.Namespace == ns && e.ObjectNew.running != e.ObjectOld.running {
				events <- "running " + e.ObjectNew.Name
				q.Add(toRequest(e.ObjectNew))
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*testSlimPod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.Object.Namespace == ns {
				events <- "delete " + e.Object.Name + " " + e.Object.configMap
				q.Add(toRequest(e.Object))
			}
		},
	}
	// Controller names are unique per process, and a test may run twice (-count, -cpu 1,4).
	require.NoError(t, builder.ControllerManagedBy(mgr).Named("slimpods-"+ns).WatchesRawSource(pods.Source(h)).
		Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			requests <- req.Name
			return reconcile.Result{}, nil
		})))
	// A source's predicates filter its events: this one passes running pods only.
	running := make(chan string, 100)
	require.NoError(t, builder.ControllerManagedBy(mgr).Named("slimpods-running-"+ns).
		WatchesRawSource(pods.Source(&handler.TypedEnqueueRequestForObject[*testSlimPod]{},
			predicate.NewTypedPredicateFuncs(func(p *testSlimPod) bool { return p.running }))).
		Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			running <- req.Name
			return reconcile.Result{}, nil
		})))
	go func() { _ = mgr.Start(ctx) }()

	assert.Equal(t, "create early", next(t, events), "a pod from before the start is replayed")
	assert.Equal(t, "for-cm-a", next(t, requests))
	got, err := pods.List("configMap", ns, "cm-a")
	require.NoError(t, err)
	require.Len(t, got, 1, "the pod of the other namespace is not listed")
	assert.Equal(t, "early", got[0].Name)
	assert.IsType(t, &testSlimPod{}, got[0], "the store holds the small type")
	byName, ok := pods.Get(types.NamespacedName{Namespace: ns, Name: "early"})
	require.True(t, ok)
	assert.Equal(t, "cm-a", byName.configMap)
	_, ok = pods.Get(types.NamespacedName{Namespace: ns, Name: "absent"})
	assert.False(t, ok)
	all, err := pods.InNamespace(other)
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Equal(t, "elsewhere", all[0].Name)
	got, err = pods.List("configMap", other, "cm-a")
	require.NoError(t, err)
	assert.Len(t, got, 1, "watching all namespaces, the other one's pod is there")
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got, err := scoped.List("configMap", ns, "cm-a")
		return len(got) == 1, err
	}), "the namespaced informer holds its namespace's pod")
	got, err = scoped.List("configMap", other, "cm-a")
	require.NoError(t, err)
	assert.Empty(t, got, "a namespace not watched lists nothing")
	all, err = scoped.InNamespace(other)
	require.NoError(t, err)
	assert.Empty(t, all)
	_, ok = scoped.Get(types.NamespacedName{Namespace: other, Name: "elsewhere"})
	assert.False(t, ok)

	late := pod(ns, "late", "cm-b")
	require.NoError(t, c.Create(ctx, late))
	assert.Equal(t, "create late", next(t, events))
	assert.Equal(t, "for-cm-b", next(t, requests))

	late.Status.Phase = corev1.PodRunning
	require.NoError(t, c.Status().Update(ctx, late))
	assert.Equal(t, "running late", next(t, events), "a status change reaches the handler")
	assert.Equal(t, "late", next(t, running), "the first pod the predicate passes is the one that runs")
	assert.Equal(t, "for-cm-b", next(t, requests))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got, err := pods.List("configMap", ns, "cm-b")
		return err == nil && len(got) == 1 && got[0].running, err
	}), "List sees the change")

	require.NoError(t, c.Delete(ctx, late))
	assert.Equal(t, "delete late cm-b", next(t, events), "a deletion reaches the handler as the small type")
	assert.Equal(t, "for-cm-b", next(t, requests))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got, err := pods.List("configMap", ns, "cm-b")
		return err == nil && len(got) == 0, err
	}), "List forgets the pod")
}
