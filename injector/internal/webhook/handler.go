// Package webhook is the admission side of the injector: it decodes the metadata and pod template of
// any of the five workload kinds, runs the pure inject package on the template and answers with a
// JSON Patch computed as the diff of the pod template before and after injection. It makes no API
// calls.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"gomodules.xyz/jsonpatch/v2"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
)

// Path is where the handler is served.
const Path = "/mutate"

// Kinds are the workload kinds the injector serves.
var Kinds = []schema.GroupKind{
	{Group: "apps", Kind: "Deployment"},
	{Group: "apps", Kind: "StatefulSet"},
	{Group: "apps", Kind: "DaemonSet"},
	{Group: "batch", Kind: "Job"},
	{Group: "batch", Kind: "CronJob"},
}

// Handler is the admission.Handler of /mutate.
type Handler struct {
	// Config returns the current configuration (the hot-reloaded one); it must not block.
	Config func() *config.Config
	// ExcludedNamespaces are never acted in: kube-system and the injector's own namespace.
	ExcludedNamespaces []string
	// Metrics may be nil.
	Metrics *Metrics
}

var _ admission.Handler = (*Handler)(nil)

// Handle implements admission.Handler.
func (h *Handler) Handle(_ context.Context, req admission.Request) admission.Response {
	start := time.Now()
	resp, result := h.handle(req)
	if h.Metrics != nil {
		h.Metrics.Duration.Observe(time.Since(start).Seconds())
		h.Metrics.Requests.WithLabelValues(req.Kind.Kind, string(req.Operation), result).Inc()
	}
	return resp
}

func (h *Handler) handle(req admission.Request) (admission.Response, string) {
	gk := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
	if !served(gk) {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("kagenti-injector serves Deployment, StatefulSet, DaemonSet (apps) and Job, CronJob (batch), not %s", gk)), ResultError
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed(""), ResultSkipped
	}
	for _, ns := range h.ExcludedNamespaces {
		if req.Namespace == ns {
			return admission.Allowed("kagenti-injector never acts in namespace " + ns), ResultSkipped
		}
	}
	if len(req.Object.Raw) == 0 {
		return admission.Errored(http.StatusBadRequest, errors.New("the request carries no object")), ResultError
	}
	var obj workload
	if err := decode(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding %s: %w", gk.Kind, err)), ResultError
	}
	mode, ok := obj.Labels[inject.LabelInject]
	switch {
	case !ok:
		return admission.Allowed("not labelled " + inject.LabelInject), ResultSkipped
	case mode != inject.InjectEnabled && mode != inject.InjectDisabled:
		return admission.Denied(fmt.Sprintf("label %s: invalid value %q: accepted values: enabled, disabled", inject.LabelInject, mode)), ResultDenied
	}
	if gk.Kind == "Job" && req.Operation == admissionv1.Update {
		// spec.template of a Job is immutable: an update must never touch it.
		return admission.Allowed("the pod template of a Job is immutable; left as is"), ResultUnchanged
	}
	before, path := obj.podTemplate(gk.Kind)
	tmpl, err := readPodTemplate(before, gk.Kind, obj.Name, path)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err), ResultError
	}

	var (
		out      *corev1.PodTemplateSpec
		changed  bool
		warnings []string
	)
	if mode == inject.InjectDisabled {
		out, changed, err = inject.Remove(tmpl)
	} else {
		if injectedByOwner(&obj, tmpl) {
			// e.g. a Job created by a CronJob: its template was injected at the CronJob, with the
			// CronJob's ConfigMaps; re-injecting would rename them after the Job.
			return admission.Allowed("pod template already injected at the owner"), ResultUnchanged
		}
		name := obj.Name
		if name == "" {
			// The API server generates the name after admission: the ConfigMaps of §5 are named
			// after the prefix (documented in docs/injector.md).
			name = strings.TrimSuffix(obj.GenerateName, "-")
			warnings = append(warnings, fmt.Sprintf("kagenti-injector: %s created with generateName: the optional ConfigMaps mounted are named after %q, not after the generated name", gk.Kind, name))
		}
		var opts inject.Options
		opts, err = inject.ParseOptions(name, obj.Labels, obj.Annotations)
		if err == nil {
			var r *inject.Rendered
			if r, err = inject.Render(h.Config(), opts); err == nil {
				out, changed, err = inject.Inject(tmpl, r)
			}
		}
	}
	var bad *inject.InvalidError
	switch {
	case errors.As(err, &bad):
		return admission.Denied(err.Error()), ResultDenied
	case err != nil:
		return admission.Errored(http.StatusBadRequest, err), ResultError
	case !changed:
		return admission.Allowed("").WithWarnings(warnings...), ResultUnchanged
	}
	resp, err := templatePatch(path, before, out)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), ResultError
	}
	return resp.WithWarnings(warnings...), ResultMutated
}

// templatePatch is the JSON Patch from the pod template before (as in the request) to after, with
// the operations' paths rooted at the object. Only the template is diffed: nothing else of the object
// (metadata.managedFields included) can ever be part of the patch, and the diff does not pay for the
// rest of the object.
func templatePatch(path []string, before json.RawMessage, after *corev1.PodTemplateSpec) (admission.Response, error) {
	b, err := json.Marshal(after)
	if err != nil {
		return admission.Response{}, err
	}
	ops, err := jsonpatch.CreatePatch(before, b)
	if err != nil {
		return admission.Response{}, err
	}
	prefix := "/" + strings.Join(path, "/")
	for i := range ops {
		ops[i].Path = prefix + ops[i].Path
	}
	resp := admission.Allowed("")
	resp.Patches = ops
	if len(ops) > 0 {
		pt := admissionv1.PatchTypeJSONPatch
		resp.PatchType = &pt
	}
	return resp, nil
}

// injectedByOwner reports whether the template already carries an injection and the object is
// controlled by another object (which was injected itself).
func injectedByOwner(w *workload, t *corev1.PodTemplateSpec) bool {
	if _, ok := t.Annotations[inject.AnnotationStatus]; !ok {
		return false
	}
	return metav1.GetControllerOfNoCopy(w) != nil
}

func served(gk schema.GroupKind) bool {
	for _, k := range Kinds {
		if k == gk {
			return true
		}
	}
	return false
}
