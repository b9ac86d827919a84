package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

var agentTraceGVK = schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentTrace"}

// TestAgentTrace: an AgentTrace for a Deployment gets its ConfigMap {workload}-trace and phase
// Active; a spec change rewrites the ConfigMap without touching the Deployment; deleting the
// AgentTrace garbage-collects the ConfigMap (the local cluster runs kube-controller-manager).
func TestAgentTrace(t *testing.T) {
	c := framework.Client(t)
	ctx := context.Background()
	ns := framework.Namespace(t, c, "agenttrace", nil)
	labels := map[string]string{"app": "traced-agent"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "traced-agent"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/kagenti/weather-agent:v0.1.0"}}}}},
	}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	at := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": ns, "name": "traced-agent-trace"},
		"spec": map[string]any{
			"targetRef": map[string]any{"kind": "Deployment", "name": "traced-agent"},
			"exporters": []any{map[string]any{"type": "otlp", "endpoint": "otel-collector.observability:4317", "insecure": true}},
			"sampling":  map[string]any{"type": "probabilistic", "rate": 0.1},
			"genai":     map[string]any{"enabled": true, "capturePrompts": true},
		},
	}}
	at.SetGroupVersionKind(agentTraceGVK)
	if err := c.Create(ctx, at); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: ns, Name: "traced-agent-trace"}
	cmKey := client.ObjectKey{Namespace: ns, Name: "traced-agent-trace"}

	framework.Eventually(t, 60*time.Second, "AgentTrace Active", func(ctx context.Context) (bool, string, error) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(agentTraceGVK)
		if err := c.Get(ctx, key, got); err != nil {
			return false, "", err
		}
		phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
		cmName, _, _ := unstructured.NestedString(got.Object, "status", "configMapName")
		return phase == "Active" && cmName == cmKey.Name, framework.Sprintf("status %v", got.Object["status"]), nil
	})
	var cm corev1.ConfigMap
	if err := c.Get(ctx, cmKey, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["otel_endpoint"] != "otel-collector.observability:4317" || !strings.Contains(cm.Data["otel.env"], "OTEL_TRACES_SAMPLER_ARG=0.1") {
		t.Fatalf("unexpected ConfigMap data: %v", cm.Data)
	}
	if ref := metav1.GetControllerOf(&cm); ref == nil || ref.Kind != "AgentTrace" {
		t.Fatalf("ConfigMap not controlled by the AgentTrace: %v", cm.OwnerReferences)
	}

	t.Run("a spec change updates the ConfigMap, not the workload", func(t *testing.T) {
		var before appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &before); err != nil {
			t.Fatal(err)
		}
		patch := []byte(`{"spec":{"sampling":{"type":"always_on","rate":null}}}`)
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(agentTraceGVK)
		obj.SetNamespace(ns)
		obj.SetName(key.Name)
		if err := c.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 30*time.Second, "sampler always_on", func(ctx context.Context) (bool, string, error) {
			var cm corev1.ConfigMap
			if err := c.Get(ctx, cmKey, &cm); err != nil {
				return false, "", err
			}
			return cm.Data["sampler"] == "always_on", "sampler=" + cm.Data["sampler"], nil
		})
		var after appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &after); err != nil {
			t.Fatal(err)
		}
		if after.Generation != before.Generation {
			t.Fatalf("Deployment generation changed %d → %d: pods would restart", before.Generation, after.Generation)
		}
	})

	t.Run("deleting the AgentTrace garbage-collects the ConfigMap", func(t *testing.T) {
		if err := c.Delete(ctx, at); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 60*time.Second, "ConfigMap deleted", func(ctx context.Context) (bool, string, error) {
			err := c.Get(ctx, cmKey, &corev1.ConfigMap{})
			if apierrors.IsNotFound(err) {
				return true, "", nil
			}
			return false, "ConfigMap still present", client.IgnoreNotFound(err)
		})
		// The workload itself is untouched.
		if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &appsv1.Deployment{}); err != nil {
			t.Fatalf("Deployment: %v", err)
		}
	})
}
