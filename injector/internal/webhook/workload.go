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
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Template    json.RawMessage `json:"template"` // Deployment, StatefulSet, DaemonSet, Job
		JobTemplate *struct {
			Spec struct {
				Template json.RawMessage `json:"template"`
			} `json:"spec"`
		} `json:"jobTemplate"` // CronJob
	} `json:"spec"`
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

// readPodTemplate decodes the pod template raw, found at path in the object named name of kind.
// Anything but a JSON object there (absent, null) is no pod template, as for pkg/duck.
func readPodTemplate(raw json.RawMessage, kind, name string, path []string) (*corev1.PodTemplateSpec, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("%s %q has no pod template at %s", kind, name, strings.Join(path, "."))
	}
	var t corev1.PodTemplateSpec
	if err := decode(raw, &t); err != nil {
		return nil, fmt.Errorf("reading pod template of %s %q: %w", kind, name, err)
	}
	return &t, nil
}
