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

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// The suites talk to the cluster through controller-runtime's client, which warns with a stack trace
// when no logger was set; the tests report through t instead.
func init() { ctrllog.SetLogger(logr.Discard()) }

// Root is the repository root.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// KubeconfigPath is $KAGENTI_E2E_KUBECONFIG, else the local cluster's .local/kubeconfig. A relative
// path is taken from the repository root (go test runs in the package directory, not where make ran).
func KubeconfigPath() string {
	if p := os.Getenv("KAGENTI_E2E_KUBECONFIG"); p != "" {
		if !filepath.IsAbs(p) {
			p = filepath.Join(Root(), p)
		}
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

// Namespace creates a namespace named prefix-<random> with the given labels, waits until its
// "default" ServiceAccount exists (pods are rejected before that), and deletes it when the test ends.
func Namespace(t testing.TB, c client.Client, prefix string, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + rand.String(5), Labels: labels}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	Eventually(t, 30*time.Second, "default ServiceAccount in namespace "+ns.Name,
		func(ctx context.Context) (bool, string, error) {
			err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})
			if apierrors.IsNotFound(err) {
				return false, "not created yet (is kube-controller-manager running?)", nil
			}
			return err == nil, "", err
		})
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

// Create creates obj, failing the test on error. The namespace of a namespaced object is usually one
// from Namespace, so it needs no cleanup of its own.
func Create(t testing.TB, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// LocalPodCIDR is the pod CIDR of the local cluster's node (hack/local.sh): pods get loopback IPs.
const LocalPodCIDR = "127.1.0.0/24"

// PauseImage is a container image that runs until stopped. Only kind runs it (kwok's nodes run
// nothing); pause is preloaded on kind nodes. Override with $KAGENTI_E2E_IMAGE.
func PauseImage() string { return envOr("KAGENTI_E2E_IMAGE", "registry.k8s.io/pause:3.10") }

// ShellImage is an image with a shell and `true`, for pods that must exit (Jobs). Only kind pulls
// it. Override with $KAGENTI_E2E_SHELL_IMAGE.
func ShellImage() string {
	return envOr("KAGENTI_E2E_SHELL_IMAGE", "registry.k8s.io/e2e-test-images/busybox:1.36.1-1")
}

// ServerImage is an image that serves TCP on the port given by "-dns.port" (CoreDNS, which every
// kind node of `make kind-up` holds). Override with $KAGENTI_E2E_SERVER_IMAGE.
func ServerImage() string {
	return envOr("KAGENTI_E2E_SERVER_IMAGE", "registry.k8s.io/coredns/coredns:v1.14.6")
}

// AgentImage is the e2e suite's stand-in agent (cmd/kagenti-e2e-agent) and IdPImage the development
// OpenID provider (hack/idp): `make e2e-kind` builds both (hack/images.sh) and loads them into the
// nodes. Override with $KAGENTI_E2E_AGENT_IMAGE and $KAGENTI_E2E_IDP_IMAGE.
func AgentImage() string {
	return envOr("KAGENTI_E2E_AGENT_IMAGE", "ghcr.io/kagenti/kagenti-e2e-agent:v0.1.0")
}

// TelemetryAgentImage is the example agent that configures OpenTelemetry from an AgentTrace's files
// (examples/agent-telemetry; hack/images.sh agent-telemetry). Override with $KAGENTI_E2E_TELEMETRY_AGENT_IMAGE.
func TelemetryAgentImage() string {
	return envOr("KAGENTI_E2E_TELEMETRY_AGENT_IMAGE", "ghcr.io/kagenti/kagenti-agent-telemetry:v0.1.0")
}

// OTLPSinkImage is an OTLP/HTTP receiver that lists the spans it received (hack/otlp-sink).
// Override with $KAGENTI_E2E_OTLP_SINK_IMAGE.
func OTLPSinkImage() string {
	return envOr("KAGENTI_E2E_OTLP_SINK_IMAGE", "ghcr.io/kagenti/kagenti-otlp-sink:v0.1.0")
}

// IdPImage: see AgentImage.
func IdPImage() string {
	return envOr("KAGENTI_E2E_IDP_IMAGE", "ghcr.io/kagenti/kagenti-dev-idp:v0.1.0")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
