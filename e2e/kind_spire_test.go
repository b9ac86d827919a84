package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// The SPIRE of the kind suite (hack/kind/spire.yaml, applied by hack/kind.sh).
const (
	spireNamespace = "spire-system"
	spireServerPod = "spire-server-0"
	// spireNodeAlias is every agent of the cluster: the parent of the tests' registration entries.
	spireNodeAlias = "spiffe://cluster.local/kagenti/kind-nodes"
	// spireBundleConfigMap holds the trust bundle (SPIFFE format, JWT and X.509 authorities) that
	// the server's k8s_configmap bundle publisher keeps current.
	spireBundleConfigMap = "spire-bundle"
	spireBundleKey       = "bundle.spiffe"
)

// requireKindSPIRE fails unless the SPIRE server and every agent are ready.
func requireKindSPIRE(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, client.ObjectKey{Namespace: spireNamespace, Name: "spire-server"}, &sts); err != nil {
		t.Fatalf("SPIRE is not installed (hack/kind.sh applies hack/kind/spire.yaml): statefulset %s/spire-server: %v", spireNamespace, err)
	}
	framework.Eventually(t, 2*time.Minute, "SPIRE server and agents ready", func(ctx context.Context) (bool, string, error) {
		var ds appsv1.DaemonSet
		if err := c.Get(ctx, client.ObjectKey{Namespace: spireNamespace, Name: "spire-agent"}, &ds); err != nil {
			return false, "", err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(&sts), &sts); err != nil {
			return false, "", err
		}
		return sts.Status.ReadyReplicas == 1 && ds.Status.NumberReady == ds.Status.DesiredNumberScheduled && ds.Status.NumberReady > 0,
			framework.Sprintf("server ready %d, agents ready %d/%d", sts.Status.ReadyReplicas, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled), nil
	})
}

// spireServerCLI runs the spire-server CLI in the server's pod, on its own socket (the image has no
// shell: kubectl exec runs the binary).
func spireServerCLI(args ...string) (string, error) {
	argv := append([]string{"--kubeconfig", framework.KubeconfigPath(), "-n", spireNamespace, "exec", spireServerPod,
		"-c", "spire-server", "--", "/spire-server"}, args...)
	out, err := exec.Command(filepath.Join(framework.Root(), "bin", "kubectl"), argv...).CombinedOutput()
	return string(out), err
}

var entryID = regexp.MustCompile(`(?m)^Entry ID\s*:\s*(\S+)`)

// registerKindWorkload gives the pods of service account ns/sa, on any node of the cluster, the
// SPIFFE ID spiffe://cluster.local/ns/<ns>/sa/<sa> (k8s workload attestor selectors), and removes
// the entry when the test ends. It returns the ID.
func registerKindWorkload(t *testing.T, ns, sa string) string {
	t.Helper()
	out, err := spireServerCLI("entry", "show", "-spiffeID", spireNodeAlias)
	if err != nil {
		t.Fatalf("spire-server entry show: %v: %s", err, out)
	}
	if !entryID.MatchString(out) {
		if out, err := spireServerCLI("entry", "create", "-node", "-spiffeID", spireNodeAlias, "-selector", "k8s_psat:cluster:kagenti"); err != nil {
			t.Fatalf("spire-server entry create (node alias %s): %v: %s", spireNodeAlias, err, out)
		}
	}
	id := "spiffe://cluster.local/ns/" + ns + "/sa/" + sa
	out, err = spireServerCLI("entry", "create", "-parentID", spireNodeAlias, "-spiffeID", id,
		"-selector", "k8s:ns:"+ns, "-selector", "k8s:sa:"+sa)
	m := entryID.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("spire-server entry create %s: %v: %s", id, err, out)
	}
	t.Cleanup(func() {
		if out, err := spireServerCLI("entry", "delete", "-entryID", m[1]); err != nil {
			t.Logf("spire-server entry delete %s (%s): %v: %s", m[1], id, err, out)
		}
	})
	return id
}

// copySPIREBundle copies the SPIRE trust bundle into ns, as ConfigMap spire-bundle, for a dev IdP
// there to verify JWT SVIDs with (a copy: the server keys of a test's few minutes do not rotate).
func copySPIREBundle(t *testing.T, c client.Client, ns string) {
	t.Helper()
	var cm corev1.ConfigMap
	framework.Eventually(t, time.Minute, "ConfigMap "+spireNamespace+"/"+spireBundleConfigMap, func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: spireNamespace, Name: spireBundleConfigMap}, &cm)
		return err == nil && cm.Data[spireBundleKey] != "", fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	framework.Create(t, c, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: spireBundleConfigMap, Namespace: ns},
		Data:       map[string]string{spireBundleKey: cm.Data[spireBundleKey]},
	})
}

// nodeFile reads a file of a pod's emptyDir volume where the kubelet keeps it, on the pod's node
// (a container of kind's: docker exec on the engine DOCKER_HOST names, which hack/kind.sh exports).
func nodeFile(t *testing.T, pod *corev1.Pod, volume, name string) string {
	t.Helper()
	if os.Getenv("DOCKER_HOST") == "" {
		t.Fatal("DOCKER_HOST is not set: export DOCKER_HOST=unix://$PWD/.local/kind/docker.sock (hack/kind.sh does)")
	}
	path := fmt.Sprintf("/var/lib/kubelet/pods/%s/volumes/kubernetes.io~empty-dir/%s/%s", pod.UID, volume, name)
	out, err := exec.Command("docker", "exec", pod.Spec.NodeName, "cat", path).CombinedOutput()
	if err != nil {
		t.Fatalf("reading %s on node %s: %v: %s", path, pod.Spec.NodeName, err, out)
	}
	return strings.TrimSpace(string(out))
}
