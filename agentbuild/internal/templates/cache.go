package templates

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
)

const (
	// Label marks a ConfigMap as a build template or step (value LabelValue). The controller reads
	// templates from a watch of the ConfigMaps carrying it, in the template namespace and in every
	// build namespace: a ConfigMap without it is not a template, wherever it is.
	Label = "kagenti.io/build-template"
	// LabelValue is the only value of Label that counts.
	LabelValue = "true"
)

// Selector selects the ConfigMaps that are templates or steps.
func Selector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{Label: LabelValue})
}

// NewCache returns an informer cache of the labelled ConfigMaps (only those: a cluster's other
// ConfigMaps are neither listed nor watched), each trimmed by Trim to what the loader reads.
// namespaces restricts it like the manager's --namespaces (empty: all); the template namespace
// is always included. The cache is a manager runnable of the caches group, so it has synced before
// any reconcile reads it.
func NewCache(c cluster.Cluster, templateNamespace string, namespaces []string) (cache.Cache, error) {
	opts := cache.Options{
		HTTPClient: c.GetHTTPClient(),
		Scheme:     c.GetScheme(),
		Mapper:     c.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: Selector(), Transform: Trim},
		},
		// Anything else asked of this cache is a bug, not a reason to start another informer.
		ReaderFailOnMissingInformer: true,
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{templateNamespace: {}}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	tc, err := cache.New(c.GetConfig(), opts)
	if err != nil {
		return nil, fmt.Errorf("template cache: %w", err)
	}
	// Create the informer now, so that starting the cache starts it and WaitForCacheSync covers it.
	if _, err := tc.GetInformer(context.Background(), &corev1.ConfigMap{}); err != nil {
		return nil, fmt.Errorf("template cache: %w", err)
	}
	return tc, nil
}

// Trim keeps of a ConfigMap its identity and the two keys a template or step is read from.
// Dropped: other data keys, binaryData, annotations (kubectl apply's last-applied-configuration
// annotation repeats the whole data), labels (the selector already chose) and managedFields.
func Trim(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone: nothing to trim
	}
	out := &corev1.ConfigMap{
		TypeMeta: cm.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cm.Namespace, Name: cm.Name, UID: cm.UID,
			ResourceVersion: cm.ResourceVersion, Generation: cm.Generation,
		},
	}
	for _, key := range []string{TemplateKey, TaskSpecKey} {
		if v, ok := cm.Data[key]; ok {
			if out.Data == nil {
				out.Data = map[string]string{}
			}
			out.Data[key] = v
		}
	}
	return out, nil
}

// Runnable wraps a template cache so that a manager starts it with its own cache, before the
// controllers, and waits for it to sync (controller-runtime groups runnables that have a cache).
type Runnable struct{ cache.Cache }

// GetCache returns the wrapped cache.
func (r Runnable) GetCache() cache.Cache { return r.Cache }
