package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/kagenti/platform/agentbuild/internal/tekton"
)

// CacheOptions is the manager's cache configuration: namespaces restricts it (empty: all), and
// every object is trimmed by TrimForCache.
func CacheOptions(namespaces []string) cache.Options {
	var byNamespace map[string]cache.Config
	for _, ns := range namespaces {
		if byNamespace == nil {
			byNamespace = map[string]cache.Config{}
		}
		byNamespace[ns] = cache.Config{}
	}
	return cache.Options{DefaultNamespaces: byNamespace, DefaultTransform: TrimForCache}
}

var stripManagedFields = cache.TransformStripManagedFields()

// TrimForCache drops from each cached object what the controller never reads, before the
// informer stores it: managedFields (with three writers per PipelineRun — the controller,
// Tekton, Tekton's status — they outweigh the rest), kubectl's last-applied-configuration
// annotation (a second copy of an applied AgentBuild's spec), and of a PipelineRun its
// workspaces (a PersistentVolumeClaim template with its resource maps, the Secrets), its pod
// template and every annotation but the workspace-cleaned mark. A run is only created from the
// rendered object, patched by merge patch or deleted, never updated from the cache, so nothing
// trimmed here is ever written back.
func TrimForCache(obj any) (any, error) {
	obj, err := stripManagedFields(obj)
	if err != nil {
		return obj, err
	}
	if o, ok := obj.(metav1.Object); ok {
		if a := o.GetAnnotations(); a != nil {
			delete(a, corev1.LastAppliedConfigAnnotation)
		}
	}
	if run, ok := obj.(*tekton.PipelineRun); ok {
		run.Spec.Workspaces = nil
		run.Spec.TaskRunTemplate = tekton.PipelineTaskRunTemplate{}
		var kept map[string]string
		if v, ok := run.Annotations[annotationWorkspaceCleaned]; ok {
			kept = map[string]string{annotationWorkspaceCleaned: v}
		}
		run.Annotations = kept
	}
	return obj, nil
}
