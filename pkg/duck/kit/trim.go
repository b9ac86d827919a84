package kit

import (
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/duck"
)

// lastApplied is kubectl's copy of the whole object as last applied: often the largest field of a
// workload, and of no use to a controller that reads the live object.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// CompactObject is the cache transform of a controller's own resource (a duck.Object): it drops
// what the controller never reads, managedFields and kubectl's last-applied copy of the whole
// object (client-side apply, Argo CD's default), which would double the cached spec, and compacts
// the status's conditions (duck.Status.Compact). The status itself stays: the status applier
// compares with it so that an unchanged status costs no write. Other objects pass through.
func CompactObject(obj any) (any, error) {
	if o, ok := obj.(duck.Object); ok {
		// Fresh from the watch decoder and not shared yet: changed in place.
		o.SetManagedFields(nil)
		delete(o.GetAnnotations(), lastApplied)
		o.GetStatus().Compact()
	}
	return obj, nil
}

// TrimmedWorkloads is the cache configuration (cache.Options.ByObject entries) for the built-in
// workload kinds of a controller that watches them (through duck.NewBuiltinObject) and resolves its
// targets from its cache (duck.NewManagerResolver) but reads little of them: every workload is kept
// typed and trimmed by TrimWorkload. The cache holds every workload of the cluster; this keeps a
// fraction of each.
//
// Typed, because a typed object costs less than the same fields as unstructured maps (every map
// level is a hash table of its own): BenchmarkWorkloadCacheEntry measures a kubectl-applied
// Deployment at ≈ 28 KB whole as unstructured, ≈ 5.3 KB trimmed as unstructured, ≈ 3.5 KB trimmed
// and typed. The entries are keyed by GroupVersionKind, so they apply to unstructured informers of
// these kinds too (TrimWorkload trims both forms).
func TrimmedWorkloads(slim func(corev1.PodTemplateSpec) corev1.PodTemplateSpec) map[client.Object]cache.ByObject {
	by := map[client.Object]cache.ByObject{}
	for _, gvk := range duck.BuiltinKinds() {
		by[duck.NewBuiltinObject(gvk)] = cache.ByObject{Transform: TrimWorkload(slim)}
	}
	return by
}

// TrimWorkload returns a cache transform that keeps of a workload its metadata (without
// managedFields and kubectl's last-applied copy), spec.selector, and its pod template as slim
// returns it: a Workload view of the result resolves, selects pods and reads the template like the
// original, as far as slim kept it. It trims the typed built-in kinds into new objects of the same
// type, and any workload read as unstructured (built-in or custom) into a new unstructured
// object. Objects that are not workloads pass through unchanged.
func TrimWorkload(slim func(corev1.PodTemplateSpec) corev1.PodTemplateSpec) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *unstructured.Unstructured:
			return trimUnstructured(o, slim), nil
		case *appsv1.Deployment:
			return &appsv1.Deployment{TypeMeta: o.TypeMeta, ObjectMeta: trimMeta(o.ObjectMeta),
				Spec: appsv1.DeploymentSpec{Selector: o.Spec.Selector, Template: slim(o.Spec.Template)}}, nil
		case *appsv1.StatefulSet:
			return &appsv1.StatefulSet{TypeMeta: o.TypeMeta, ObjectMeta: trimMeta(o.ObjectMeta),
				Spec: appsv1.StatefulSetSpec{Selector: o.Spec.Selector, Template: slim(o.Spec.Template)}}, nil
		case *appsv1.DaemonSet:
			return &appsv1.DaemonSet{TypeMeta: o.TypeMeta, ObjectMeta: trimMeta(o.ObjectMeta),
				Spec: appsv1.DaemonSetSpec{Selector: o.Spec.Selector, Template: slim(o.Spec.Template)}}, nil
		case *appsv1.ReplicaSet:
			return &appsv1.ReplicaSet{TypeMeta: o.TypeMeta, ObjectMeta: trimMeta(o.ObjectMeta),
				Spec: appsv1.ReplicaSetSpec{Selector: o.Spec.Selector, Template: slim(o.Spec.Template)}}, nil
		case *batchv1.Job:
			return &batchv1.Job{TypeMeta: o.TypeMeta, ObjectMeta: trimMeta(o.ObjectMeta),
				Spec: batchv1.JobSpec{Selector: o.Spec.Selector, Template: slim(o.Spec.Template)}}, nil
		case *batchv1.CronJob:
			return &batchv1.CronJob{TypeMeta: o.TypeMeta, ObjectMeta: trimMeta(o.ObjectMeta),
				Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{
					Spec: batchv1.JobSpec{Template: slim(o.Spec.JobTemplate.Spec.Template)}}}}, nil
		}
		return obj, nil
	}
}

// trimMeta drops managedFields and kubectl's last-applied copy. The annotations are copied when
// one is dropped, so the object trimmed is never changed.
func trimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	m.ManagedFields = nil
	if _, ok := m.Annotations[lastApplied]; ok {
		a := make(map[string]string, len(m.Annotations)-1)
		for k, v := range m.Annotations {
			if k != lastApplied {
				a[k] = v
			}
		}
		m.Annotations = a
	}
	return m
}

// trimUnstructured is TrimWorkload for a workload read as unstructured; u itself when it is not
// one (no pod template where its kind keeps it).
func trimUnstructured(u *unstructured.Unstructured, slim func(corev1.PodTemplateSpec) corev1.PodTemplateSpec) any {
	w, err := duck.NewWorkload(u)
	if err != nil {
		return u
	}
	tmpl, err := w.PodTemplate()
	if err != nil {
		return u
	}
	trimmed := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(),
		"kind":       u.GetKind(),
		"metadata":   u.Object["metadata"], // u is fresh from the decoder and discarded: shared
	}}
	trimmed.SetManagedFields(nil)
	if a := trimmed.GetAnnotations(); a[lastApplied] != "" {
		delete(a, lastApplied)
		trimmed.SetAnnotations(a)
	}
	spec := map[string]any{}
	if sel, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "selector"); found {
		spec["selector"] = sel
	}
	trimmed.Object["spec"] = spec
	if err := unstructured.SetNestedMap(trimmed.Object, map[string]any{}, w.TemplatePath()...); err != nil {
		return u
	}
	tw, err := duck.NewWorkload(trimmed)
	if err != nil {
		return u
	}
	if err := tw.SetPodTemplate(new(slim(*tmpl))); err != nil {
		return u
	}
	return trimmed
}

// TemplateMetaPresence returns a pod template's metadata as a cache keeps it for a controller that
// reads of it the labels (a kind without spec.selector selects its pods by them) and only whether
// annotation is set (e.g. the injector's status annotation): the labels, and annotation with an
// empty value when the template carries it, in one map shared by every such template. The
// template's other metadata and the annotation's value (the injector's is ≈ 110 bytes) are
// dropped. Sharing the map is safe because a cache hands its objects out as deep copies only.
func TemplateMetaPresence(m metav1.ObjectMeta, annotation string) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Labels: m.Labels}
	if _, ok := m.Annotations[annotation]; ok {
		marker, _ := presenceMarkers.LoadOrStore(annotation, map[string]string{annotation: ""})
		out.Annotations = marker.(map[string]string)
	}
	return out
}

// presenceMarkers holds TemplateMetaPresence's shared annotation maps, one per annotation name.
var presenceMarkers sync.Map
