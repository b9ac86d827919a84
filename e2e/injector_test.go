package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// The injected containers (docs/architecture.md §5): proxy-init and the one authbridge container
// running client-registration, auth-proxy and envoy-proxy; spiffe-helper only with
// kagenti.io/spiffe=enabled.
var injectedSidecars = []string{"proxy-init", "authbridge"}

func initContainerNames(p *corev1.PodSpec) []string {
	var out []string
	for _, c := range p.InitContainers {
		out = append(out, c.Name)
	}
	return out
}

func TestInjector(t *testing.T) {
	c := framework.Client(t)
	ctx := context.Background()
	ns := framework.Namespace(t, c, "injector", map[string]string{"kagenti.io/injection": "enabled"})
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "e2e-agent"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/kagenti/weather-agent:v0.1.0"}}},
	}

	t.Run("a labelled Deployment's pods carry the sidecars", func(t *testing.T) {
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent", Labels: map[string]string{"kagenti.io/inject": "enabled"}},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: tmpl},
		}
		if err := c.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 60*time.Second, "injected pod", func(ctx context.Context) (bool, string, error) {
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(tmpl.Labels)); err != nil {
				return false, "", err
			}
			if len(pods.Items) == 0 {
				return false, "no pods yet", nil
			}
			got := initContainerNames(&pods.Items[0].Spec)
			for _, want := range injectedSidecars {
				if !slices.Contains(got, want) {
					return false, framework.Sprintf("pod %s init containers %v lack %s", pods.Items[0].Name, got, want), nil
				}
			}
			// One process runs the three roles, registration first.
			args := pods.Items[0].Spec.InitContainers[slices.Index(got, "authbridge")].Args
			if want := []string{"sidecar", "register", "inbound", "outbound"}; !slices.Equal(args, want) {
				return false, "", fmt.Errorf("pod %s: authbridge args %v, want %v", pods.Items[0].Name, args, want)
			}
			return true, "", nil
		})
	})

	t.Run("a labelled Job with native sidecars completes", func(t *testing.T) {
		job := tmpl.DeepCopy()
		job.Spec.RestartPolicy = corev1.RestartPolicyNever
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "report", Labels: map[string]string{"kagenti.io/inject": "enabled"}},
			Spec:       batchv1.JobSpec{Template: *job, BackoffLimit: ptr.To[int32](0)},
		}
		if err := c.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
		if got := initContainerNames(&j.Spec.Template.Spec); !slices.Contains(got, "authbridge") {
			t.Fatalf("Job template not injected: %v", got)
		}
		framework.Eventually(t, 120*time.Second, "Job complete", func(ctx context.Context) (bool, string, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(j), j); err != nil {
				return false, "", err
			}
			for _, cond := range j.Status.Conditions {
				if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
					return true, "", nil
				}
				if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
					return false, "", fmt.Errorf("job failed: %s", cond.Message)
				}
			}
			return false, framework.Sprintf("status %+v", j.Status), nil
		})
	})

	t.Run("a kagenti.io/inject value other than enabled or disabled is refused", func(t *testing.T) {
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "odd", Labels: map[string]string{"kagenti.io/inject": "true"}},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: *tmpl.DeepCopy()},
		}
		err := c.Create(ctx, d)
		if err == nil || !strings.Contains(err.Error(), `label kagenti.io/inject: invalid value "true": accepted values: enabled, disabled`) {
			t.Fatalf("want a denial naming the label and its value, got %v", err)
		}
	})

	t.Run("a hostNetwork Deployment is not injected", func(t *testing.T) {
		host := tmpl.DeepCopy()
		host.Spec.HostNetwork = true
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "host", Labels: map[string]string{"kagenti.io/inject": "enabled"}},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: *host},
		}
		if err := c.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		if got := initContainerNames(&d.Spec.Template.Spec); len(got) != 0 {
			t.Fatalf("hostNetwork Deployment was injected: %v", got)
		}
	})

	t.Run("an unlabelled Deployment is untouched", func(t *testing.T) {
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "plain"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "plain"}}, Spec: tmpl.Spec}},
		}
		if err := c.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		if len(d.Spec.Template.Spec.InitContainers) != 0 || d.Spec.Template.Annotations["kagenti.io/injection-status"] != "" {
			t.Fatalf("unlabelled Deployment was injected: %v", initContainerNames(&d.Spec.Template.Spec))
		}
	})
}
