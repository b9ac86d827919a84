package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// localClusterDir is where kwokctl keeps the local cluster (hack/local.sh: KWOK_WORKDIR=.local/kwok).
func localClusterDir() string {
	return filepath.Join(framework.Root(), ".local", "kwok", "clusters", "kagenti")
}

// componentPID is the PID kwokctl (or the supervisor, after a restart) recorded for a component.
func componentPID(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(localClusterDir(), "pids", name+".pid"))
	if err != nil {
		t.Fatalf("the local cluster's %s PID: %v", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the local cluster's %s PID file: %v", name, err)
	}
	return pid
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may itself hold spaces.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// TestDestructiveControlPlaneOutage: after an API server outage long enough for
// kube-controller-manager and kube-scheduler to lose their leases (they exit by design), the local
// cluster's supervisor (hack/local-supervise.sh) starts them again, says why in
// .local/logs/control-plane.log, and garbage collection, namespace deletion and scheduling work again.
// It freezes the API server, so it runs in the destructive phase, alone.
func TestDestructiveControlPlaneOutage(t *testing.T) {
	requireDestructive(t)
	if framework.ClusterKind() != "local" {
		t.Skipf("the supervisor is the local cluster's (this is %s, whose kubelet restarts the control plane)", framework.ClusterKind())
	}
	c := framework.Client(t)
	apiserver := componentPID(t, "kube-apiserver")
	before := map[string]int{}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
		before[name] = componentPID(t, name)
		if !alive(before[name]) {
			t.Fatalf("%s (pid %d) is not running before the outage", name, before[name])
		}
	}

	// The outage: the API server stopped (its connections hang, as behind a lost network) until both
	// components have given up their leases and exited.
	if err := syscall.Kill(apiserver, syscall.SIGSTOP); err != nil {
		t.Fatalf("stopping kube-apiserver (pid %d): %v", apiserver, err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(apiserver, syscall.SIGCONT)
		}
	}
	defer resume()
	deadline := time.Now().Add(90 * time.Second)
	for alive(before["kube-controller-manager"]) || alive(before["kube-scheduler"]) {
		if time.Now().After(deadline) {
			resume()
			t.Fatalf("90 s into the API server outage kube-controller-manager (alive: %v) and kube-scheduler (alive: %v) still run: "+
				"they no longer exit on a lost lease, so this test no longer exercises the supervisor",
				alive(before["kube-controller-manager"]), alive(before["kube-scheduler"]))
		}
		time.Sleep(250 * time.Millisecond)
	}
	resume()

	for name, old := range before {
		framework.Eventually(t, time.Minute, name+" restarted by the supervisor", func(context.Context) (bool, string, error) {
			b, err := os.ReadFile(filepath.Join(localClusterDir(), "pids", name+".pid"))
			if err != nil {
				return false, err.Error(), nil
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if pid == old || !alive(pid) {
				return false, framework.Sprintf("recorded pid %d (was %d), alive %v", pid, old, alive(pid)), nil
			}
			// The supervisor logs a restart and records the PID as two writes: wait for both.
			log, err := os.ReadFile(filepath.Join(framework.Root(), ".local", "logs", "control-plane.log"))
			if err != nil {
				return false, err.Error(), nil
			}
			if !strings.Contains(string(log), "restarted "+name+" as pid "+strconv.Itoa(pid)+" ") {
				return false, framework.Sprintf("control-plane.log does not yet say that %s was restarted as pid %d:\n%s", name, pid, log), nil
			}
			return true, "", nil
		})
	}
	log, err := os.ReadFile(filepath.Join(framework.Root(), ".local", "logs", "control-plane.log"))
	if err != nil {
		t.Fatalf("the supervisor's log: %v", err)
	}
	for name, old := range before {
		exited := name + " (pid " + strconv.Itoa(old) + ") exited: "
		i := strings.Index(string(log), exited)
		if i < 0 {
			t.Errorf("control-plane.log does not say that %s exited:\n%s", name, log)
			continue
		}
		reason, _, _ := strings.Cut(string(log[i+len(exited):]), "\n")
		if strings.TrimSpace(reason) == "" {
			t.Errorf("control-plane.log gives no reason for the exit of %s:\n%s", name, log)
		}
	}

	// Scheduling: a new Deployment gets Running pods (kube-controller-manager makes them,
	// kube-scheduler binds them).
	ns := framework.Namespace(t, c, "e2e-outage", nil)
	labels := map[string]string{"app": "after-outage"}
	framework.Create(t, c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "after-outage", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: framework.PauseImage()}}},
			},
		},
	})
	framework.PodsOf(t, c, ns, labels, 1)

	// Garbage collection and namespace deletion: a deleted namespace goes away with its objects.
	gone := framework.Namespace(t, c, "e2e-outage-gc", nil)
	framework.Create(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "left", Namespace: gone}})
	if err := c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gone}}); err != nil {
		t.Fatalf("deleting namespace %s: %v", gone, err)
	}
	framework.Eventually(t, 2*time.Minute, "namespace "+gone+" deleted (not stuck in Terminating)", func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKey{Name: gone}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", client.IgnoreNotFound(err)
	})
}
