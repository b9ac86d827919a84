package webhook

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
)

// workload is what the handler reads of any of the five kinds: the metadata, and the pod template
// wherever the kind keeps it. The rest of the object is never decoded. Reading the whole object as
// unstructured and converting the template by reflection (pkg/duck) cost the admission path several
// times the injection itself.
type workload struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Template    json.RawMessage `json:"template"` // Deployment, StatefulSet, DaemonSet, Job
		JobTemplate *struct {
			Spec struct {
				Template json.RawMessage `json:"template"`
			} `json:"spec"`
		} `json:"jobTemplate"` // CronJob
	} `json:"spec"`
}

// objectMeta is the part of the metadata the handler reads. The rest (managedFields above all, which
// the API server fills in before admission) is skipped by the decoder without being allocated.
type objectMeta struct {
	Name            string                  `json:"name,omitempty"`
	GenerateName    string                  `json:"generateName,omitempty"`
	Labels          map[string]string       `json:"labels,omitempty"`
	Annotations     map[string]string       `json:"annotations,omitempty"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`
}

// controlled reports whether another object is the controller of this one.
func (m *objectMeta) controlled() bool {
	for _, r := range m.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return true
		}
	}
	return false
}

// decode decodes data into v as the API server does: keys match case-sensitively, so a key the API
// server ignores is ignored here too.
func decode(data []byte, v any) error {
	return sigsjson.UnmarshalCaseSensitivePreserveInts(data, v)
}

// podTemplate returns the pod template of w as it is in the request, and where kind keeps it. The
// template is kept raw because it is the document the API server applies the patch to.
func (w *workload) podTemplate(kind string) (json.RawMessage, []string) {
	if kind == "CronJob" {
		path := []string{"spec", "jobTemplate", "spec", "template"}
		if w.Spec.JobTemplate == nil {
			return nil, path
		}
		return w.Spec.JobTemplate.Spec.Template, path
	}
	return w.Spec.Template, []string{"spec", "template"}
}

// readPodTemplate decodes the pod template raw, found at path in the object named name of kind, in
// one pass. hasMetadata reports whether raw has a metadata object (not absent, not null), which
// decides how a patch adds the first annotation. Anything but a JSON object at path (absent, null)
// is no pod template, as for pkg/duck.
func readPodTemplate(raw json.RawMessage, kind, name string, path []string) (t *corev1.PodTemplateSpec, hasMetadata bool, err error) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false, fmt.Errorf("%s %q has no pod template at %s", kind, name, strings.Join(path, "."))
	}
	var decoded struct {
		Metadata *metav1.ObjectMeta `json:"metadata"`
		Spec     corev1.PodSpec     `json:"spec"`
	}
	if err := decode(raw, &decoded); err != nil {
		return nil, false, fmt.Errorf("reading pod template of %s %q: %w", kind, name, err)
	}
	t = &corev1.PodTemplateSpec{Spec: decoded.Spec}
	if decoded.Metadata != nil {
		t.ObjectMeta = *decoded.Metadata
	}
	return t, decoded.Metadata != nil, nil
}
