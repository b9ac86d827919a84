// Package framework is what the end-to-end suites share: a client for the cluster under test
// (the local kwok cluster by default, kind in `make e2e-kind`), throwaway namespaces, polling, and
// loopback HTTP servers that answer for pods.
package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Root is the repository root.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// KubeconfigPath is $KAGENTI_E2E_KUBECONFIG, else the local cluster's .local/kubeconfig.
func KubeconfigPath() string {
	if p := os.Getenv("KAGENTI_E2E_KUBECONFIG"); p != "" {
		return p
	}
	return filepath.Join(Root(), ".local", "kubeconfig")
}

// ClusterKind is "local" (kwok, the default) or "kind".
func ClusterKind() string {
	if k := os.Getenv("KAGENTI_E2E_CLUSTER"); k != "" {
		return k
	}
	return "local"
}

// Config returns the REST config of the cluster under test, failing the test with a hint when
// there is none (the suite is meant to run through `make e2e`).
func Config(t testing.TB) *rest.Config {
	t.Helper()
	path := KubeconfigPath()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no cluster: %s is missing; run the suite with `make e2e` (or `make up` first)", path)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg
}

// Client returns a controller-runtime client for the cluster under test with the client-go scheme.
// Tests that read kagenti.io objects use unstructured.Unstructured (the e2e module imports no pillar).
func Client(t testing.TB) client.Client {
	t.Helper()
	c, err := client.New(Config(t), client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c
}

// Namespace creates a namespace named prefix-<random> with the given labels and deletes it when
// the test ends.
func Namespace(t testing.TB, c client.Client, prefix string, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + rand.String(5), Labels: labels}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	return ns.Name
}

// Eventually polls cond every 250 ms until it returns true, fails on its error, or fails the test
// after timeout with the last message cond returned.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true,
		func(ctx context.Context) (bool, error) {
			ok, msg, err := cond(ctx)
			last = msg
			return ok, err
		})
	if err != nil {
		t.Fatalf("%s: %v (last: %s)", what, err, last)
	}
}

// Sprintf is fmt.Sprintf, for building messages in Eventually conditions.
func Sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
