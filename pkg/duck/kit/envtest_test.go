package kit

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kagenti/platform/pkg/duck"
)

var (
	testCfg    *rest.Config
	testScheme = runtime.NewScheme()
)

// TestMain runs the package against a real kube-apiserver and etcd (envtest, binaries from
// KUBEBUILDER_ASSETS), with pkg/duck's test CRDs (a custom workload kind, AgentSet).
func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		println("KUBEBUILDER_ASSETS is not set: run `make unit` (it builds the API server into bin/ and points here)")
		os.Exit(1)
	}
	_ = clientgoscheme.AddToScheme(testScheme)
	// envtest's default start timeout, 20 s, is shorter than kube-apiserver's start on two loaded cores.
	env := &envtest.Environment{ControlPlaneStartTimeout: 2 * time.Minute,
		CRDDirectoryPaths: []string{filepath.Join("..", "testdata", "crds")}, ErrorIfCRDPathMissing: true}
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

// createBuiltins stores one object of each built-in kind in ns.
func createBuiltins(t *testing.T, c client.Client, ns string) {
	for kind, obj := range builtinObjects() {
		o := obj.(client.Object)
		o.SetNamespace(ns)
		o.SetUID("")
		o.SetGeneration(0)
		require.NoError(t, c.Create(context.Background(), o), kind)
	}
}

var podLabels = map[string]string{"app": "agent"}

func template() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:v1"}}},
	}
}

// jobTemplate is template() with the restart policy the API server requires of Jobs.
func jobTemplate() corev1.PodTemplateSpec {
	t := template()
	t.Spec.RestartPolicy = corev1.RestartPolicyNever
	return t
}

// builtinObjects returns one object of every built-in kind.
func builtinObjects() map[string]runtime.Object {
	meta := metav1.ObjectMeta{Name: "agent", Namespace: "ns", UID: "uid-1", Generation: 2}
	selector := &metav1.LabelSelector{MatchLabels: podLabels}
	return map[string]runtime.Object{
		"Deployment":  &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Selector: selector, Template: template()}},
		"StatefulSet": &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), Selector: selector, Template: template()}},
		"DaemonSet":   &appsv1.DaemonSet{ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{Selector: selector, Template: template()}},
		"ReplicaSet":  &appsv1.ReplicaSet{ObjectMeta: meta, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: selector, Template: template()}},
		"Job":         &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{Template: jobTemplate()}},
		"CronJob": &batchv1.CronJob{ObjectMeta: meta, Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: jobTemplate()}}}},
	}
}

func gvkOf(kind string) schema.GroupVersionKind {
	v, _ := duck.DefaultAPIVersion(kind)
	gv, _ := schema.ParseGroupVersion(v)
	return gv.WithKind(kind)
}

// customObject is an AgentSet (testdata/crds) with a pod template at spec.template.
func customObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.kagenti.io/v1", "kind": "AgentSet",
		"metadata": map[string]any{"name": "custom", "namespace": "ns", "generation": int64(1)},
		"spec":     map[string]any{"replicas": int64(2)},
	}}
	tm, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(ptr.To(template()))
	_ = unstructured.SetNestedMap(u.Object, tm, "spec", "template")
	return u
}

// next is the next value on ch; the test fails when none comes within 20 s.
func next(t *testing.T, ch chan string) string {
	select {
	case s := <-ch:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no value received")
		return ""
	}
}
