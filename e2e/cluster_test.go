package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/e2e/framework"
)

func TestClusterNodesReady(t *testing.T) {
	c := framework.Client(t)
	framework.Eventually(t, time.Minute, "every node Ready", func(ctx context.Context) (bool, string, error) {
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes); err != nil {
			return false, "", err
		}
		if len(nodes.Items) == 0 {
			return false, "no nodes", nil
		}
		var notReady []string
		for _, n := range nodes.Items {
			if !clusterNodeReady(&n) {
				notReady = append(notReady, n.Name)
			}
		}
		return len(notReady) == 0, fmt.Sprintf("not ready: %v", notReady), nil
	})
	if framework.ClusterKind() != "local" {
		return
	}
	var nodes corev1.NodeList
	if err := c.List(context.Background(), &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.PodCIDR != framework.LocalPodCIDR {
			t.Errorf("node %s: podCIDR %q, want %q (hack/local.sh creates the node with a loopback pod CIDR)", n.Name, n.Spec.PodCIDR, framework.LocalPodCIDR)
		}
	}
}

func TestClusterDeploymentGetsPods(t *testing.T) {
	c := framework.Client(t)
	ns := framework.Namespace(t, c, "e2e-deploy", nil)
	labels := map[string]string{"app": "sleeper"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: framework.PauseImage()}}},
			},
		},
	}
	framework.Create(t, c, d)
	pods := framework.PodsOf(t, c, ns, labels, 3)

	framework.Eventually(t, time.Minute, "deployment available", func(ctx context.Context) (bool, string, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return false, "", err
		}
		return d.Status.AvailableReplicas == 3, fmt.Sprintf("%d/3 available", d.Status.AvailableReplicas), nil
	})

	t.Run("loopback pod IPs", func(t *testing.T) {
		if framework.ClusterKind() != "local" {
			t.Skipf("pod IPs are loopback addresses only on the local cluster (this is %s)", framework.ClusterKind())
		}
		_, cidr, _ := net.ParseCIDR(framework.LocalPodCIDR)
		seen := map[string]string{}
		for _, p := range pods {
			ip := net.ParseIP(p.Status.PodIP)
			if ip == nil || !ip.IsLoopback() || !cidr.Contains(ip) {
				t.Errorf("pod %s: IP %q is not in the loopback pod CIDR %s", p.Name, p.Status.PodIP, framework.LocalPodCIDR)
			}
			if other, dup := seen[p.Status.PodIP]; dup {
				t.Errorf("pods %s and %s share the IP %s", other, p.Name, p.Status.PodIP)
			}
			seen[p.Status.PodIP] = p.Name
		}
	})
}

func TestClusterJobCompletes(t *testing.T) {
	c := framework.Client(t)
	ns := framework.Namespace(t, c, "e2e-job", nil)
	cases := map[string]corev1.PodSpec{
		"plain": {
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: framework.ShellImage(), Command: []string{"true"}}},
		},
		// The injector adds its sidecars as native sidecars (init containers with restartPolicy
		// Always); a Job must still complete with one.
		"native-sidecar": {
			RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{
				Name: "sidecar", Image: framework.PauseImage(), RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			}},
			Containers: []corev1.Container{{Name: "main", Image: framework.ShellImage(), Command: []string{"true"}}},
		},
	}
	for name, spec := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			job := &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: batchv1.JobSpec{
					BackoffLimit: ptr.To[int32](0),
					Template:     corev1.PodTemplateSpec{Spec: spec},
				},
			}
			framework.Create(t, c, job)
			framework.Eventually(t, framework.PodTimeout, "job "+name+" complete", func(ctx context.Context) (bool, string, error) {
				if err := c.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
					return false, "", err
				}
				for _, cond := range job.Status.Conditions {
					if cond.Status != corev1.ConditionTrue {
						continue
					}
					switch cond.Type {
					case batchv1.JobComplete:
						return true, "", nil
					case batchv1.JobFailed:
						return false, "", fmt.Errorf("job failed: %s: %s", cond.Reason, cond.Message)
					}
				}
				return false, fmt.Sprintf("active=%d succeeded=%d failed=%d", job.Status.Active, job.Status.Succeeded, job.Status.Failed), nil
			})
		})
	}
}

// TestClusterCRDsInstalled checks that every CRD generated into deploy/crds is established.
func TestClusterCRDsInstalled(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(framework.Root(), "deploy", "crds", "*", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		names = append(names, clusterCRDNames(t, f)...)
	}
	if len(names) == 0 {
		t.Skip("no CRDs under deploy/crds yet")
	}
	c := framework.Client(t)
	for _, name := range names {
		framework.Eventually(t, 30*time.Second, "CRD "+name+" established", func(ctx context.Context) (bool, string, error) {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
			if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return false, err.Error(), client.IgnoreNotFound(err)
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, "", nil
				}
			}
			return false, "not established", nil
		})
	}
}

// TestClusterPillarsReady checks that every pillar binary the local cluster started answers /readyz,
// or on kind that every pillar Deployment in kagenti-system is available.
func TestClusterPillarsReady(t *testing.T) {
	if framework.ClusterKind() != "local" {
		c := framework.Client(t)
		var list appsv1.DeploymentList
		if err := c.List(context.Background(), &list, client.InNamespace(framework.SystemNamespace)); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 0 {
			t.Skipf("no pillar deployed in %s", framework.SystemNamespace)
		}
		for _, d := range list.Items {
			if d.Status.AvailableReplicas < 1 {
				t.Errorf("deployment %s/%s: %d available replicas", d.Namespace, d.Name, d.Status.AvailableReplicas)
			}
		}
		return
	}
	pillars := framework.RunningPillars(t)
	if len(pillars) == 0 {
		t.Skip("no pillar binary is running: hack/local.sh starts those built into bin/ (`make build`)")
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, p := range pillars {
		t.Run(p.Name, func(t *testing.T) {
			for _, path := range []string{"/readyz", "/healthz"} {
				url := strings.TrimSuffix(p.ReadyzURL(), "/readyz") + path
				resp, err := hc.Get(url)
				if err != nil {
					t.Fatalf("kagenti-%s: GET %s: %v (log: .local/logs/%s.log)", p.Name, url, err, p.Name)
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("kagenti-%s: GET %s: %s: %s", p.Name, url, resp.Status, body)
				}
			}
		})
	}
}

// TestClusterServeOnPodIP proves the loopback pod IPs are usable: this test process answers HTTP on a
// pod's IP, as agentcard's tests do to serve an agent card for an agent pod.
func TestClusterServeOnPodIP(t *testing.T) {
	if framework.ClusterKind() != "local" {
		t.Skipf("serving on a pod IP needs the local cluster's loopback pod IPs (this is %s)", framework.ClusterKind())
	}
	c := framework.Client(t)
	ns := framework.Namespace(t, c, "e2e-podip", nil)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "agent", Image: framework.PauseImage(), Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
	framework.Create(t, c, pod)
	pod = framework.WaitPod(t, c, ns, pod.Name)

	want := "hello from " + pod.Name
	framework.ServeOnPodIP(t, pod.Status.PodIP, 8080, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, want)
	}))
	url := fmt.Sprintf("http://%s/", net.JoinHostPort(pod.Status.PodIP, "8080"))
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != want {
		t.Fatalf("GET %s: %s %q, want 200 %q", url, resp.Status, body, want)
	}
}

func clusterNodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// clusterCRDNames returns the names of the CustomResourceDefinitions in a (multi-document) YAML file.
func clusterCRDNames(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, doc := range strings.Split(string(data), "\n---") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if obj.Kind == "CustomResourceDefinition" {
			names = append(names, obj.Metadata.Name)
		}
	}
	return names
}
