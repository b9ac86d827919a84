package duck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

var (
	testCfg    *rest.Config
	testScheme = runtime.NewScheme()
)

// TestMain runs the package against a real kube-apiserver and etcd (envtest, binaries from
// KUBEBUILDER_ASSETS, built by `make tools`).
func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		println("KUBEBUILDER_ASSETS is not set: run `make unit` (it builds the API server into bin/ and points here)")
		os.Exit(1)
	}
	_ = clientgoscheme.AddToScheme(testScheme)
	_ = addTestReferrer(testScheme)
	_ = addGadget(testScheme)
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("testdata", "crds")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		println("starting envtest:", err.Error())
		os.Exit(1)
	}
	testCfg = cfg
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func newClient(t *testing.T) client.Client {
	c, err := client.New(testCfg, client.Options{Scheme: testScheme})
	require.NoError(t, err)
	return c
}

// namespace creates a namespace named prefix-<random> (a test may run more than once per API
// server: -count, -cpu 1,4) and returns its name.
func namespace(t *testing.T, c client.Client, prefix string) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	require.NoError(t, c.Create(context.Background(), ns))
	return ns.Name
}

// createBuiltin stores one object of each built-in kind in ns and returns them by kind.
func createBuiltins(t *testing.T, c client.Client, ns string) {
	for kind, obj := range builtinObjects() {
		o := obj.(client.Object)
		o.SetNamespace(ns)
		o.SetUID("")
		o.SetGeneration(0)
		require.NoError(t, c.Create(context.Background(), o), kind)
	}
}

func TestResolveOnAPIServer(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c, "resolve")
	createBuiltins(t, c, ns)

	custom := customObject(true)
	custom.SetNamespace(ns)
	require.NoError(t, c.Create(context.Background(), custom))

	r := NewResolver(c)
	ctx := context.Background()
	for _, gvk := range BuiltinKinds() {
		t.Run(gvk.Kind, func(t *testing.T) {
			w, err := r.Resolve(ctx, ns, TargetRef{Kind: gvk.Kind, Name: "agent"})
			require.NoError(t, err)
			assert.Equal(t, gvk.Kind, w.Kind())
			assert.NotEmpty(t, w.UID(), "read from the API server")
			tmpl, err := w.PodTemplate()
			require.NoError(t, err)
			assert.Equal(t, "agent", tmpl.Spec.Containers[0].Name)
			sel, err := w.Selector()
			require.NoError(t, err)
			assert.True(t, sel.Matches(labelSet(tmpl.Labels)), "the selector selects the template's pods: %s", sel)

			if gvk.Kind == "Job" {
				// A Job's pod template is immutable once created: writers must never try.
				tmpl.Annotations = map[string]string{"kagenti.io/test": "written"}
				require.NoError(t, w.SetPodTemplate(tmpl))
				assert.ErrorContains(t, c.Update(ctx, w.Object()), "field is immutable")
				return
			}

			// The view writes back: update the stored object through it.
			tmpl.Annotations = map[string]string{"kagenti.io/test": "written"}
			require.NoError(t, w.SetPodTemplate(tmpl))
			require.NoError(t, c.Update(ctx, w.Object()))
			again, err := r.Resolve(ctx, ns, TargetRef{Kind: gvk.Kind, Name: "agent"})
			require.NoError(t, err)
			got, _ := again.PodTemplate()
			assert.Equal(t, "written", got.Annotations["kagenti.io/test"])
		})
	}
	t.Run("custom PodSpecable CRD", func(t *testing.T) {
		w, err := r.Resolve(ctx, ns, TargetRef{APIVersion: "example.kagenti.io/v1", Kind: "AgentSet", Name: "custom"})
		require.NoError(t, err)
		tmpl, err := w.PodTemplate()
		require.NoError(t, err)
		assert.Equal(t, "agent:v1", tmpl.Spec.Containers[0].Image)
	})
	t.Run("missing workload", func(t *testing.T) {
		_, err := r.Resolve(ctx, ns, TargetRef{Kind: "Deployment", Name: "nope"})
		assert.True(t, IsTargetNotFound(err), "%v", err)
		assert.EqualError(t, err, fmt.Sprintf(`Deployment "nope" not found in namespace %q`, ns))
	})
	t.Run("kind not served", func(t *testing.T) {
		_, err := r.Resolve(ctx, ns, TargetRef{APIVersion: "example.kagenti.io/v1", Kind: "Nothing", Name: "x"})
		assert.True(t, IsUnsupportedKind(err), "%v", err)
		assert.EqualError(t, err, "kind Nothing.example.kagenti.io is not served by the API server")
	})
	t.Run("cluster-scoped kind", func(t *testing.T) {
		_, err := r.Resolve(ctx, ns, TargetRef{APIVersion: "v1", Kind: "Namespace", Name: ns})
		assert.True(t, IsUnsupportedKind(err), "%v", err)
	})
	t.Run("kind without pod template", func(t *testing.T) {
		require.NoError(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: ns}}))
		_, err := r.Resolve(ctx, ns, TargetRef{APIVersion: "v1", Kind: "ConfigMap", Name: "cm"})
		assert.True(t, IsUnsupportedKind(err), "%v", err)
		assert.Equal(t, ReasonUnsupportedKind, ReasonOf(err))
	})
	t.Run("invalid reference", func(t *testing.T) {
		_, err := r.Resolve(ctx, ns, TargetRef{Kind: "AgentSet", Name: "custom"})
		assert.Equal(t, ReasonInvalidTargetRef, ReasonOf(err))
	})
}

// TestReferrersRecoverWhenTargetAppears runs a controller that watches Deployments and AgentSets
// through EnqueueReferrers: a referrer created before its workload is reconciled again as soon as
// the workload appears, and only referrers of that workload are.
func TestReferrersRecoverWhenTargetAppears(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c, "referrers")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The cache sees this test's namespace only: earlier runs' referrers stay in the API server.
	mgr, err := ctrl.NewManager(testCfg, ctrl.Options{Scheme: testScheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}})
	require.NoError(t, err)
	require.NoError(t, IndexTargetRef(ctx, mgr.GetFieldIndexer(), &testReferrer{}))

	seen := make(chan string, 100)
	newList := func() client.ObjectList { return &testReferrerList{} }
	agentSet := &unstructured.Unstructured{}
	agentSet.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.kagenti.io", Version: "v1", Kind: "AgentSet"})
	// Controller names are unique per process, and a test may run twice (-count, -cpu 1,4).
	err = builder.ControllerManagedBy(mgr).Named("referrers-"+ns).For(&testReferrer{}).
		Watches(&appsDeployment{}, EnqueueReferrers(mgr.GetClient(), schema.GroupKind{Group: "apps", Kind: "Deployment"}, newList)).
		Watches(agentSet, EnqueueReferrers(mgr.GetClient(), agentSet.GroupVersionKind().GroupKind(), newList)).
		Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			seen <- req.Name
			return reconcile.Result{}, nil
		}))
	require.NoError(t, err)
	go func() { _ = mgr.Start(ctx) }()

	mk := func(name string, ref *TargetRef) {
		o := &testReferrer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: testReferrerSpec{TargetRef: ref}}
		o.SetGroupVersionKind(testReferrerGV.WithKind("TestReferrer"))
		require.NoError(t, c.Create(ctx, o))
	}
	mk("wants-deploy", &TargetRef{Kind: "Deployment", Name: "late"})
	mk("wants-custom", &TargetRef{APIVersion: "example.kagenti.io/v1", Kind: "AgentSet", Name: "late"})
	mk("selector-mode", nil)
	drain(seen, 3)

	dep := builtinObjects()["Deployment"].(*appsDeployment)
	dep.Name, dep.Namespace, dep.UID = "late", ns, ""
	require.NoError(t, c.Create(ctx, dep))
	assert.Equal(t, "wants-deploy", next(t, seen), "the Deployment's referrer is reconciled when it appears")

	custom := customObject(true)
	custom.SetName("late")
	custom.SetNamespace(ns)
	require.NoError(t, c.Create(ctx, custom))
	assert.Equal(t, "wants-custom", next(t, seen), "a custom kind's referrer is reconciled when it appears")

	select {
	case extra := <-seen:
		t.Fatalf("unexpected reconcile of %s", extra)
	case <-time.After(300 * time.Millisecond):
	}
}

func next(t *testing.T, ch chan string) string {
	select {
	case s := <-ch:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no reconcile request")
		return ""
	}
}

func drain(ch chan string, n int) {
	for i := 0; i < n; i++ {
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			return
		}
	}
}
