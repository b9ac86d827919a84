package e2e

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

var agentBuildGVK = schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentBuild"}

// TestAgentBuildWithoutTekton: on a cluster without Tekton Pipelines an AgentBuild is accepted,
// reports Ready=False and Stalled=True reason TektonNotInstalled with phase Pending, and changes
// nothing else.
func TestAgentBuildWithoutTekton(t *testing.T) {
	c := framework.Client(t)
	framework.RequirePillar(t, c, "agentbuild")
	ctx := context.Background()

	// This test is about a cluster without Tekton; skip (saying why) where Tekton is installed.
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := c.Get(ctx, client.ObjectKey{Name: "pipelineruns.tekton.dev"}, crd); err == nil {
		t.Skip("Tekton Pipelines is installed on this cluster; TektonNotInstalled cannot be observed")
	} else if !apierrors.IsNotFound(err) {
		t.Fatalf("looking for Tekton's CRD: %v", err)
	}

	ns := framework.Namespace(t, c, "agentbuild", nil)
	b := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"source":      map[string]any{"repository": "https://github.com/kagenti/agent-examples", "subfolder": "a2a/weather_service"},
			"buildOutput": map[string]any{"image": "kagenti/weather-agent"},
		},
	}}
	b.SetGroupVersionKind(agentBuildGVK)
	b.SetNamespace(ns)
	b.SetName("weather-agent")
	framework.Create(t, c, b)

	framework.Eventually(t, 60*time.Second, "AgentBuild Ready=False reason TektonNotInstalled", func(ctx context.Context) (bool, string, error) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(agentBuildGVK)
		if err := c.Get(ctx, client.ObjectKeyFromObject(b), got); err != nil {
			return false, "", err
		}
		phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		byType := map[string]map[string]any{}
		for _, raw := range conds {
			cond, _ := raw.(map[string]any)
			byType[framework.Sprintf("%v", cond["type"])] = cond
		}
		ready, stalled := byType["Ready"], byType["Stalled"]
		if ready == nil {
			return false, "phase " + phase + ", no Ready condition yet", nil
		}
		ok := ready["status"] == "False" && ready["reason"] == "TektonNotInstalled" && phase == "Pending" &&
			stalled != nil && stalled["status"] == "True" && stalled["reason"] == "TektonNotInstalled"
		return ok, framework.Sprintf("phase %s, Ready=%v reason %v: %v; Stalled: %v", phase, ready["status"], ready["reason"], ready["message"], stalled), nil
	})
	// Defaults from the CRD schema are visible to users.
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(agentBuildGVK)
	if err := c.Get(ctx, client.ObjectKeyFromObject(b), got); err != nil {
		t.Fatal(err)
	}
	if mode, _, _ := unstructured.NestedString(got.Object, "spec", "mode"); mode != "dev" {
		t.Errorf("spec.mode defaulted to %q, want dev", mode)
	}
}
