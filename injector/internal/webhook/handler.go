// Package webhook is the admission side of the injector: it decodes any of the five workload kinds
// through pkg/duck, runs the pure inject package on its pod template and answers with a JSON Patch
// computed as the diff of the pod template before and after injection. It makes no API calls.
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"gomodules.xyz/jsonpatch/v2"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
	"github.com/kagenti/platform/pkg/duck"
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
	var obj map[string]any
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding %s: %w", gk.Kind, err)), ResultError
	}
	u := &unstructured.Unstructured{Object: obj}
	if u.GroupVersionKind().Empty() {
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind})
	}
	mode, ok := u.GetLabels()[inject.LabelInject]
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
	w, err := duck.NewWorkload(u)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err), ResultError
	}
	before, err := templateJSON(w)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err), ResultError
	}
	tmpl, err := w.PodTemplate()
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
		if injectedByOwner(u, tmpl) {
			// e.g. a Job created by a CronJob: its template was injected at the CronJob, with the
			// CronJob's ConfigMaps; re-injecting would rename them after the Job.
			return admission.Allowed("pod template already injected at the owner"), ResultUnchanged
		}
		name := u.GetName()
		if name == "" {
			// The API server generates the name after admission: the ConfigMaps of §5 are named
			// after the prefix (documented in docs/injector.md).
			name = strings.TrimSuffix(u.GetGenerateName(), "-")
			warnings = append(warnings, fmt.Sprintf("kagenti-injector: %s created with generateName: the optional ConfigMaps mounted are named after %q, not after the generated name", gk.Kind, name))
		}
		var opts inject.Options
		opts, err = inject.ParseOptions(name, u.GetLabels(), u.GetAnnotations())
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
	if err := w.SetPodTemplate(out); err != nil {
		return admission.Errored(http.StatusInternalServerError, err), ResultError
	}
	after, err := templateJSON(w)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), ResultError
	}
	resp, err := templatePatch(w.TemplatePath(), before, after)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), ResultError
	}
	return resp.WithWarnings(warnings...), ResultMutated
}

// templateJSON encodes the pod template of w as it is in the object. Only the template is diffed:
// nothing else of the object (metadata.managedFields included) can ever be part of the patch, and
// the diff does not pay for the rest of the object.
func templateJSON(w *duck.Workload) ([]byte, error) {
	t, _, err := unstructured.NestedFieldNoCopy(w.Object().Object, w.TemplatePath()...)
	if err != nil {
		return nil, err
	}
	return json.Marshal(t)
}

// templatePatch is the JSON Patch from before to after (both the pod template at path), with the
// operations' paths rooted at the object.
func templatePatch(path []string, before, after []byte) (admission.Response, error) {
	ops, err := jsonpatch.CreatePatch(before, after)
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
func injectedByOwner(u *unstructured.Unstructured, t *corev1.PodTemplateSpec) bool {
	if _, ok := t.Annotations[inject.AnnotationStatus]; !ok {
		return false
	}
	return metav1.GetControllerOfNoCopy(u) != nil
}

func served(gk schema.GroupKind) bool {
	for _, k := range Kinds {
		if k == gk {
			return true
		}
	}
	return false
}
