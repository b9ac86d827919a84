package apply

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kagenti/platform/cli/internal/kube"
)

// The integration tests share one real kube-apiserver + etcd (envtest) with the pillars' CRDs from
// deploy/crds and the legacy CRDs of the e2e fixtures.
var (
	testCfg *rest.Config
	clients *kube.Clients
)

// repo is the repository root.
func repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

func runSuite(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: the integration tests need kube-apiserver and etcd; run `make tools` and set KUBEBUILDER_ASSETS to its bin/ (the Makefile does)")
		return 1
	}
	var paths []string
	for _, p := range []string{"tokenexchange", "agenttrace", "agentcard", "agentbuild"} {
		paths = append(paths, filepath.Join(repo(), "deploy", "crds", p))
	}
	paths = append(paths, filepath.Join(repo(), "e2e", "testdata", "cli", "legacy-crds.yaml"))
	env := &envtest.Environment{CRDDirectoryPaths: paths, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	testCfg = cfg
	if clients, err = kube.NewForConfig(cfg, nil); err != nil {
		fmt.Fprintf(os.Stderr, "clients: %v\n", err)
		return 1
	}
	return m.Run()
}

// scratchNamespace creates a namespace of its own for one test run (tests run more than once with -count).
func scratchNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns, err := clients.Kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

// ensureNamespace creates ns unless it exists.
func ensureNamespace(t *testing.T, ns string) {
	t.Helper()
	_, err := clients.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
}
