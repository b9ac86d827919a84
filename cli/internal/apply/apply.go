// Package apply writes objects to a cluster with server-side apply: first all of them as a server
// dry run (validation, defaulting and admission webhooks, nothing stored), then for real.
package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kagenti/platform/cli/internal/kube"
)

// Applier server-side applies objects under one field manager.
type Applier struct {
	Clients      *kube.Clients
	FieldManager string
	// ForceConflicts takes over fields another manager owns with a different value (kubectl's
	// --force-conflicts); without it such a conflict is an error.
	ForceConflicts bool
}

// Apply applies obj; with dryRun the API server validates it, runs admission (webhooks included) and
// returns the object it would store, without storing it.
func (a *Applier) Apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	ri, _, err := a.Clients.Resource(obj.GroupVersionKind(), obj.GetNamespace())
	if err != nil {
		return nil, err
	}
	opts := metav1.ApplyOptions{FieldManager: a.FieldManager, Force: a.ForceConflicts}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return ri.Apply(ctx, obj.GetName(), obj, opts)
}

// Ref names an object the way kubectl prints it: deployment.apps/echo, service/echo.
func Ref(gvk schema.GroupVersionKind, name string) string {
	kind := strings.ToLower(gvk.Kind)
	if gvk.Group != "" {
		kind += "." + gvk.Group
	}
	return kind + "/" + name
}

// RemoveOwnerReferences removes the ownerReferences of obj that point at any of uids, with a JSON
// patch that first tests each entry (a concurrent change fails the patch instead of removing the
// wrong entry). It reports whether it removed any.
func RemoveOwnerReferences(ctx context.Context, c *kube.Clients, obj *unstructured.Unstructured, uids map[string]bool) (bool, error) {
	var ops []map[string]any
	refs := obj.GetOwnerReferences()
	for i := len(refs) - 1; i >= 0; i-- {
		if !uids[string(refs[i].UID)] {
			continue
		}
		path := fmt.Sprintf("/metadata/ownerReferences/%d", i)
		ops = append(ops, map[string]any{"op": "test", "path": path + "/uid", "value": string(refs[i].UID)},
			map[string]any{"op": "remove", "path": path})
	}
	if len(ops) == 0 {
		return false, nil
	}
	return true, jsonPatch(ctx, c, obj, ops)
}

// Disown removes the ownerReferences of obj that point at any of uids and its label labelKey, in one
// JSON patch that tests each removed entry; it returns the label's value ("" when there was none).
func Disown(ctx context.Context, c *kube.Clients, obj *unstructured.Unstructured, uids map[string]bool, labelKey string) (string, error) {
	var ops []map[string]any
	refs := obj.GetOwnerReferences()
	for i := len(refs) - 1; i >= 0; i-- {
		if uids[string(refs[i].UID)] {
			path := fmt.Sprintf("/metadata/ownerReferences/%d", i)
			ops = append(ops, map[string]any{"op": "test", "path": path + "/uid", "value": string(refs[i].UID)},
				map[string]any{"op": "remove", "path": path})
		}
	}
	value, has := obj.GetLabels()[labelKey]
	if has {
		path := "/metadata/labels/" + strings.ReplaceAll(strings.ReplaceAll(labelKey, "~", "~0"), "/", "~1")
		ops = append(ops, map[string]any{"op": "test", "path": path, "value": value}, map[string]any{"op": "remove", "path": path})
	}
	if len(ops) == 0 {
		return "", nil
	}
	return value, jsonPatch(ctx, c, obj, ops)
}

// RemoveFinalizer removes finalizer from obj if present, testing the resourceVersion first, and
// returns the object as stored afterwards.
func RemoveFinalizer(ctx context.Context, c *kube.Clients, obj *unstructured.Unstructured, finalizer string) (*unstructured.Unstructured, error) {
	for i, f := range obj.GetFinalizers() {
		if f != finalizer {
			continue
		}
		ops := []map[string]any{
			{"op": "test", "path": "/metadata/resourceVersion", "value": obj.GetResourceVersion()},
			{"op": "remove", "path": fmt.Sprintf("/metadata/finalizers/%d", i)},
		}
		ri, _, err := c.Resource(obj.GroupVersionKind(), obj.GetNamespace())
		if err != nil {
			return nil, err
		}
		raw, _ := json.Marshal(ops)
		return ri.Patch(ctx, obj.GetName(), "application/json-patch+json", raw, metav1.PatchOptions{})
	}
	return obj, nil
}

func jsonPatch(ctx context.Context, c *kube.Clients, obj *unstructured.Unstructured, ops []map[string]any) error {
	ri, _, err := c.Resource(obj.GroupVersionKind(), obj.GetNamespace())
	if err != nil {
		return err
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	_, err = ri.Patch(ctx, obj.GetName(), "application/json-patch+json", raw, metav1.PatchOptions{})
	return err
}
