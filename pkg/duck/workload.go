package duck

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Workload is a view of one PodSpecable object. It wraps the object read as unstructured, so every
// kind goes through the same code; SetPodTemplate writes into that object (persist it with Object()).
type Workload struct {
	obj  *unstructured.Unstructured
	kind kindInfo
}

// kindInfo is what differs between workload kinds.
type kindInfo struct {
	templatePath []string
	readiness    func(u *unstructured.Unstructured) Readiness
}

var (
	specTemplate    = []string{"spec", "template"}
	cronJobTemplate = []string{"spec", "jobTemplate", "spec", "template"}
)

func kindInfoFor(gvk schema.GroupVersionKind) (kindInfo, bool) {
	switch gvk.GroupKind() {
	case schema.GroupKind{Group: "apps", Kind: "Deployment"}:
		return kindInfo{specTemplate, deploymentReadiness}, true
	case schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}:
		return kindInfo{specTemplate, replicaReadiness}, true
	case schema.GroupKind{Group: "apps", Kind: "DaemonSet"}:
		return kindInfo{specTemplate, daemonSetReadiness}, true
	case schema.GroupKind{Group: "batch", Kind: "Job"}:
		return kindInfo{specTemplate, jobReadiness}, true
	case schema.GroupKind{Group: "batch", Kind: "CronJob"}:
		return kindInfo{cronJobTemplate, cronJobReadiness}, true
	}
	return kindInfo{}, false
}

// NewWorkload returns the view of obj, or an UnsupportedKind error when obj carries no pod template
// where its kind keeps one. Custom kinds are accepted when spec.template is an object.
func NewWorkload(obj *unstructured.Unstructured) (*Workload, error) {
	gvk := obj.GroupVersionKind()
	info, builtin := kindInfoFor(gvk)
	if !builtin {
		info = kindInfo{specTemplate, customReadiness}
	}
	if _, found, err := unstructured.NestedMap(obj.Object, info.templatePath...); err != nil || !found {
		return nil, newError(ReasonUnsupportedKind, err,
			"%s %q has no pod template at %s", gvk.Kind, obj.GetName(), strings.Join(info.templatePath, "."))
	}
	return &Workload{obj: obj, kind: info}, nil
}

// NewWorkloadFromObject converts a typed object (e.g. *appsv1.Deployment) to a view. The GVK is
// taken from gvk because typed objects read through controller-runtime have an empty TypeMeta.
func NewWorkloadFromObject(obj runtime.Object, gvk schema.GroupVersionKind) (*Workload, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if u.GroupVersionKind().Empty() {
			u.SetGroupVersionKind(gvk)
		}
		return NewWorkload(u)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %s: %w", gvk.Kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return NewWorkload(u)
}

// Object returns the underlying object, including any change made with SetPodTemplate.
func (w *Workload) Object() *unstructured.Unstructured { return w.obj }

func (w *Workload) Name() string                              { return w.obj.GetName() }
func (w *Workload) Namespace() string                         { return w.obj.GetNamespace() }
func (w *Workload) UID() types.UID                            { return w.obj.GetUID() }
func (w *Workload) Kind() string                              { return w.obj.GetKind() }
func (w *Workload) GroupVersionKind() schema.GroupVersionKind { return w.obj.GroupVersionKind() }
func (w *Workload) Generation() int64                         { return w.obj.GetGeneration() }

// TemplatePath is where the pod template lives in the object, e.g. spec.jobTemplate.spec.template.
func (w *Workload) TemplatePath() []string { return append([]string(nil), w.kind.templatePath...) }

// PodTemplate returns a copy of the pod template.
func (w *Workload) PodTemplate() (*corev1.PodTemplateSpec, error) {
	m, _, err := unstructured.NestedMap(w.obj.Object, w.kind.templatePath...)
	if err != nil {
		return nil, err
	}
	var t corev1.PodTemplateSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &t); err != nil {
		return nil, fmt.Errorf("reading pod template of %s %q: %w", w.Kind(), w.Name(), err)
	}
	return &t, nil
}

// SetPodTemplate replaces the pod template in the underlying object.
func (w *Workload) SetPodTemplate(t *corev1.PodTemplateSpec) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(t)
	if err != nil {
		return err
	}
	return unstructured.SetNestedMap(w.obj.Object, m, w.kind.templatePath...)
}

// Selector returns the label selector of the workload's pods: spec.selector where the kind has one,
// otherwise (CronJob, custom kinds without a selector) the labels of the pod template.
func (w *Workload) Selector() (labels.Selector, error) {
	if m, found, err := unstructured.NestedMap(w.obj.Object, "spec", "selector"); err == nil && found && w.kind.templatePath[1] == "template" {
		var ls metav1.LabelSelector
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ls); err != nil {
			return nil, fmt.Errorf("reading spec.selector of %s %q: %w", w.Kind(), w.Name(), err)
		}
		return metav1.LabelSelectorAsSelector(&ls)
	}
	t, err := w.PodTemplate()
	if err != nil {
		return nil, err
	}
	if len(t.Labels) == 0 {
		return nil, newError(ReasonUnsupportedKind, nil,
			"%s %q has neither spec.selector nor pod template labels to select its pods", w.Kind(), w.Name())
	}
	return labels.SelectorFromSet(t.Labels), nil
}

// PodLabels returns the labels of the pod template (what every pod of the workload carries).
func (w *Workload) PodLabels() (map[string]string, error) {
	t, err := w.PodTemplate()
	if err != nil {
		return nil, err
	}
	return t.Labels, nil
}
