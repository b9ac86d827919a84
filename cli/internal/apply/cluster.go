package apply

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kagenti/platform/cli/internal/kube"
	"github.com/kagenti/platform/cli/internal/migrate"
	"github.com/kagenti/platform/pkg/duck"
)

// ReadLegacy lists the legacy objects of every legacy kind the cluster serves, in namespace ("" for
// all), and the live workloads the migration must know about: the Deployment each Agent owns (its
// selector is immutable) and each AgentRuntime's target (to mount skills into its agent container).
func ReadLegacy(ctx context.Context, c *kube.Clients, namespace string) ([]migrate.Input, map[string]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	served := 0
	for _, gvk := range migrate.LegacyKinds {
		if !c.Served(gvk) {
			continue
		}
		served++
		items, err := c.List(ctx, gvk, namespace, metav1.ListOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		for i := range items {
			objs = append(objs, &items[i])
		}
	}
	if served == 0 {
		return nil, nil, fmt.Errorf("the cluster serves none of the legacy kinds (agent.kagenti.dev/v1alpha1 Agent, AgentRuntime, AgentCard, AgentBuild; kagenti.io/v1alpha1 Agent): nothing to migrate from it")
	}
	live := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		var kind, name, apiVersion string
		switch o.GroupVersionKind() {
		case migrate.UpstreamAgent, migrate.SeedAgent:
			kind, name, apiVersion = "Deployment", o.GetName(), "apps/v1"
		case migrate.UpstreamAgentRuntime:
			kind, _, _ = unstructured.NestedString(o.Object, "spec", "targetRef", "kind")
			name, _, _ = unstructured.NestedString(o.Object, "spec", "targetRef", "name")
			apiVersion, _, _ = unstructured.NestedString(o.Object, "spec", "targetRef", "apiVersion")
		default:
			continue
		}
		if kind == "" || name == "" {
			continue
		}
		if apiVersion == "" {
			apiVersion, _ = duck.DefaultAPIVersion(kind)
		}
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil || apiVersion == "" {
			continue
		}
		w, err := c.Get(ctx, gv.WithKind(kind), o.GetNamespace(), name)
		switch {
		case err == nil:
			live[migrate.LiveKey(kind, o.GetNamespace(), name)] = w
		case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		default:
			return nil, nil, fmt.Errorf("reading %s %s/%s: %w", kind, o.GetNamespace(), name, err)
		}
	}
	return migrate.FromCluster(objs), live, nil
}
