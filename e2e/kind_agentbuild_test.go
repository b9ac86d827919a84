package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// The in-cluster registry and git server of hack/kind/tekton.sh (hack/kind/registry.yaml).
const (
	kindRegistry  = "registry.kagenti-system.svc.cluster.local:5000"
	kindAgentRepo = "http://gitserver.kagenti-system.svc/agent.git"
)

// TestKindAgentBuildOnTekton: an AgentBuild in the shipped "dev" mode builds the example agent
// (examples/agent-telemetry, served by the in-cluster git server with a Dockerfile that compiles it)
// on a real Tekton Pipelines, pushes it to the in-cluster registry, reports image@sha256:… in its
// status and puts it into a Deployment's container; the kubelet pulls that digest from the registry
// and the pod runs the program that was built. The shipped clone and build steps run unchanged but
// for their images (GIT_IMAGE, BUILDAH_IMAGE: Debian's git and buildah, since alpine/git and
// quay.io/buildah are not reachable here).
func TestKindAgentBuildOnTekton(t *testing.T) {
	requireKind(t)
	tools := os.Getenv("KAGENTI_E2E_BUILD_TOOLS_IMAGE")
	if tools == "" {
		t.Skip("no Tekton on this cluster: hack/kind/tekton.sh installs it and sets KAGENTI_E2E_BUILD_TOOLS_IMAGE")
	}
	c := framework.Client(t)
	framework.RequirePillar(t, c, "agentbuild")
	ns := framework.Namespace(t, c, "kind-build", nil)
	// Builds run only where the platform engineer allows them (docs/agentbuild.md, RBAC).
	framework.Create(t, c, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kagenti-agentbuild-builder", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "kagenti-agentbuild-builder"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kagenti-system", Name: "kagenti-agentbuild"}},
	})

	// The workload the build deploys to exists first, running a placeholder.
	labels := map[string]string{"app": "built-agent"}
	framework.Create(t, c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "built-agent", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr.To(false),
				Containers:                   []corev1.Container{{Name: "agent", Image: framework.PauseImage(), SecurityContext: restrictedContainer()}},
			}},
		},
	})
	b := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"mode":        "dev",
		"source":      map[string]any{"repository": kindAgentRepo, "revision": "main"},
		"buildOutput": map[string]any{"image": "kagenti/agent-telemetry", "tag": "e2e"},
		"pipeline": map[string]any{"parameters": []any{
			map[string]any{"name": "GIT_IMAGE", "value": tools},
			map[string]any{"name": "BUILDAH_IMAGE", "value": tools},
		}},
		"deployTo": map[string]any{"targetRef": map[string]any{"kind": "Deployment", "name": "built-agent"}, "container": "agent"},
	}}}
	b.SetGroupVersionKind(agentBuildGVK)
	b.SetNamespace(ns)
	b.SetName("agent-telemetry")
	start := time.Now()
	framework.Create(t, c, b)

	var built string
	framework.Eventually(t, 15*time.Minute, "the AgentBuild Succeeded with image@digest", func(ctx context.Context) (bool, string, error) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(agentBuildGVK)
		if err := c.Get(ctx, client.ObjectKeyFromObject(b), got); err != nil {
			return false, "", err
		}
		phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
		msg, _, _ := unstructured.NestedString(got.Object, "status", "message")
		built, _, _ = unstructured.NestedString(got.Object, "status", "builtImage")
		if phase == "Failed" {
			run, _, _ := unstructured.NestedString(got.Object, "status", "pipelineRunName")
			t.Fatalf("the build failed: %s\n%s", msg, buildLogs(ns, run))
		}
		return phase == "Succeeded", "phase " + phase + ": " + msg, nil
	})
	t.Logf("built %s in %s", built, time.Since(start).Round(time.Second))
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(kindRegistry+"/kagenti/agent-telemetry") + `@sha256:[0-9a-f]{64}$`).MatchString(built) {
		t.Fatalf("status.builtImage is %q, want %s/kagenti/agent-telemetry@sha256:<digest>", built, kindRegistry)
	}
	digest := built[strings.LastIndex(built, "@")+1:]

	// The kubelet pulled that digest from the in-cluster registry and runs the program built from
	// the repository: the example agent's first log line. The pod found here is the one to read,
	// not any ready pod of the Deployment: during the rollout the pause pod it replaces is still ready.
	var pod string
	framework.Eventually(t, 5*time.Minute, "a ready pod of built-agent running "+built, func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return false, "", err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || len(p.Status.ContainerStatuses) == 0 {
				continue
			}
			s := p.Status.ContainerStatuses[0]
			if p.Spec.Containers[0].Image == built && s.Ready && strings.HasSuffix(s.ImageID, digest) {
				pod = p.Name
				return true, "", nil
			}
		}
		return false, framework.Sprintf("%d pods: %s", len(pods.Items), podSummary(pods.Items)), nil
	})
	// The container has no probe, so it is ready as soon as it starts, maybe before its first line.
	framework.Eventually(t, time.Minute, "pod "+pod+" logs the example agent's first line", func(context.Context) (bool, string, error) {
		logs := podLogs(t, ns, pod)
		return strings.Contains(logs, "no AgentTrace configuration: tracing off"), "its logs:\n" + logs, nil
	})
}

// podSummary says, per pod, its image and its first container's state.
func podSummary(pods []corev1.Pod) string {
	var out []string
	for _, p := range pods {
		state := "no status"
		if len(p.Status.ContainerStatuses) > 0 {
			s := p.Status.ContainerStatuses[0]
			switch {
			case s.State.Waiting != nil:
				state = s.State.Waiting.Reason + " " + s.State.Waiting.Message
			case s.State.Running != nil:
				state = framework.Sprintf("running, ready %v, image %s", s.Ready, s.ImageID)
			case s.State.Terminated != nil:
				state = "terminated " + s.State.Terminated.Reason
			}
		}
		out = append(out, p.Name+" ("+p.Spec.Containers[0].Image+"): "+state)
	}
	return strings.Join(out, "; ")
}

// buildLogs are the logs of the PipelineRun's task pods, for the failure message.
func buildLogs(ns, run string) string {
	out, _ := exec.Command(filepath.Join(framework.Root(), "bin", "kubectl"), "--kubeconfig", framework.KubeconfigPath(),
		"-n", ns, "logs", "--all-containers", "--prefix", "--tail", "40", "-l", "tekton.dev/pipelineRun="+run).CombinedOutput()
	return string(out)
}
