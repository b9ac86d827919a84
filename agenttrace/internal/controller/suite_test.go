package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

// The integration tests share one real kube-apiserver + etcd (envtest) and one manager running the
// controller in-process, exactly as main wires it.
var (
	testCfg    *rest.Config
	k8s        client.Client // a direct (uncached) client for the tests' own reads and writes
	testScheme = k8sruntime.NewScheme()
)

func crdDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "crds", "agenttrace")
}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: the integration tests need kube-apiserver and etcd; "+
			"run `make tools` and set KUBEBUILDER_ASSETS=/work/main/bin (the Makefile does)")
		return 1
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			fmt.Fprintf(os.Stderr, "%s missing in KUBEBUILDER_ASSETS=%s: run `make tools`\n", bin, assets)
			return 1
		}
	}
	logf.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapLevel())))
	_ = clientgoscheme.AddToScheme(testScheme)
	_ = v1alpha1.AddToScheme(testScheme)

	env := &envtest.Environment{CRDDirectoryPaths: []string{crdDir()}, ErrorIfCRDPathMissing: true, Scheme: testScheme}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	testCfg = cfg
	testCfg.QPS, testCfg.Burst = 500, 1000
	k8s, err = client.New(cfg, client.Options{Scheme: testScheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := startManager(ctx, Options{NotOwnedRetry: 200 * time.Millisecond}); err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		return 1
	}
	return m.Run()
}

func zapLevel() zapcore.Level {
	if os.Getenv("KAGENTI_TEST_LOG") != "" {
		return -2
	}
	return 2 // errors only
}

// startManager runs the controller as main does (cache and client options included).
func startManager(ctx context.Context, opts Options) error {
	mgr, err := ctrl.NewManager(testCfg, ctrl.Options{
		Scheme:  testScheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   CacheOptions(),
		Client:  ClientOptions(),
	})
	if err != nil {
		return err
	}
	if err := Setup(mgr, opts); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager stopped: %v\n", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not sync")
	}
	return nil
}

// --- helpers ----------------------------------------------------------------------------------

func newNamespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "at-" + rand.String(6)}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("namespace: %v", err)
	}
	return ns.Name
}

// deployment creates a Deployment; injected adds the injector's status annotation to its template.
func deployment(t testing.TB, ns, name string, injected bool) *appsv1.Deployment {
	t.Helper()
	d := newDeploymentObj(ns, name)
	if injected {
		d.Spec.Template.Annotations = map[string]string{contract.InjectionStatusAnnotation: `{"version":"test"}`}
	}
	if err := k8s.Create(context.Background(), d); err != nil {
		t.Fatalf("deployment: %v", err)
	}
	return d
}

func newDeploymentObj(ns, name string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:v1"}}},
			},
		},
	}
}

func agentTrace(ns, name, target string) *v1alpha1.AgentTrace {
	return &v1alpha1.AgentTrace{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentTraceSpec{
			TargetRef: duckRef("Deployment", target),
			Exporters: []v1alpha1.Exporter{{Type: v1alpha1.ExporterOTLP, Endpoint: "otel-collector.observability:4317", Insecure: true}},
		},
	}
}

func create(t testing.TB, o client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), o); err != nil {
		t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

// eventually polls cond until it returns "" (success) or fails the test with its last message.
func eventually(t testing.TB, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: %s", what, last)
}

func getAT(t testing.TB, ns, name string) *v1alpha1.AgentTrace {
	t.Helper()
	var at v1alpha1.AgentTrace
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &at); err != nil {
		t.Fatalf("get AgentTrace: %v", err)
	}
	return &at
}

// waitStatus waits for the AgentTrace's status to describe its current generation with the phase
// and Ready reason given, and returns it.
func waitStatus(t testing.TB, ns, name string, phase v1alpha1.Phase, readyReason string) *v1alpha1.AgentTrace {
	t.Helper()
	var at *v1alpha1.AgentTrace
	eventually(t, fmt.Sprintf("AgentTrace %s phase %s reason %s", name, phase, readyReason), func() string {
		at = getAT(t, ns, name)
		ready := findCond(at, v1alpha1.ConditionReady)
		if at.Status.ObservedGeneration != at.Generation || at.Status.Phase != phase || ready == nil || ready.Reason != readyReason {
			return fmt.Sprintf("status %+v", at.Status)
		}
		return ""
	})
	return at
}

func findCond(at *v1alpha1.AgentTrace, t string) *metav1.Condition {
	for i := range at.Status.Conditions {
		if at.Status.Conditions[i].Type == t {
			return &at.Status.Conditions[i]
		}
	}
	return nil
}
