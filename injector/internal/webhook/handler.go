// Package webhook is the admission side of the injector: it decodes the metadata and pod template of
// any of the five workload kinds, runs the pure inject package on the template and answers with a
// JSON Patch: for a fresh injection, the operations that add what injection added (appendPatch);
// otherwise the diff of the pod template before and after. It makes no API calls.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
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
	// PodSecurity, when not nil, is read to warn when the namespace's Pod Security level forbids
	// what is injected (NamespaceLevels: a cache, no API call).
	PodSecurity PodSecurityLevels

	// renders keeps the rendered components per configuration and options.
	renders inject.RenderCache
}

var _ admission.Handler = (*Handler)(nil)

// Handle implements admission.Handler.
func (h *Handler) Handle(_ context.Context, req admission.Request) admission.Response {
	return h.handleInto(req, nil)
}

// handleInto is Handle with the patch encoded into patch (when not nil) instead of a slice of its
// own: resp.Patch is then valid until patch is reused. ReviewHandler passes a pooled buffer that it
// reuses once the answer is written: the patch is the largest allocation of an admission.
func (h *Handler) handleInto(req admission.Request, patch *bytes.Buffer) admission.Response {
	start := time.Now()
	resp, result := h.handle(req, patch)
	if h.Metrics != nil {
		h.Metrics.Duration.Observe(time.Since(start).Seconds())
		h.Metrics.Requests.WithLabelValues(req.Kind.Kind, string(req.Operation), result).Inc()
	}
	return resp
}

func (h *Handler) handle(req admission.Request, patch *bytes.Buffer) (admission.Response, string) {
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
	mode, ok := obj.Metadata.Labels[inject.LabelInject]
	switch {
	case !ok:
		return admission.Allowed("not labelled " + inject.LabelInject), ResultSkipped
	case mode != inject.InjectEnabled && mode != inject.InjectDisabled:
		// kagenti.io/inject: true, yes, Enabled… would otherwise leave the workload without identity
		// and nobody told (the objectSelector lets every value of the key through).
		return deny(req, gk.Kind, &obj, fmt.Sprintf("label %s: invalid value %q: accepted values: enabled, disabled", inject.LabelInject, mode))
	}
	if gk.Kind == "Job" && req.Operation == admissionv1.Update {
		// spec.template of a Job is immutable: an update must never touch it.
		return admission.Allowed("the pod template of a Job is immutable; left as is"), ResultUnchanged
	}
	before, path := obj.podTemplate(gk.Kind)
	tmpl, hasMetadata, err := readPodTemplate(before, gk.Kind, obj.Metadata.Name, path)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err), ResultError
	}
	if err := inject.CheckTemplate(tmpl); err != nil {
		return deny(req, gk.Kind, &obj, strings.Join(path, ".")+".metadata.labels: "+err.Error())
	}

	var (
		out      *corev1.PodTemplateSpec
		changed  bool
		warnings []string
		result   = ResultMutated
		// fresh: an injection into a template that carries none, which only adds.
		fresh bool
		// rendered: what was injected, if anything; its elements come pre-encoded.
		rendered *inject.Rendered
	)
	if mode == inject.InjectDisabled {
		out, changed, err = inject.Remove(tmpl)
	} else if reason := inject.NotInjectable(tmpl); reason != "" {
		// Not injected; an injection from before the template switched is removed.
		if out, changed, err = inject.Remove(tmpl); changed {
			reason += "; the parts injected before were removed"
		}
		warnings = append(warnings, fmt.Sprintf("kagenti-injector: %s %q is not injected: %s", gk.Kind, displayName(&obj), reason))
		result = ResultSkipped
	} else {
		if injectedByOwner(&obj, tmpl) {
			// e.g. a Job created by a CronJob: its template was injected at the CronJob, with the
			// CronJob's ConfigMaps; re-injecting would rename them after the Job.
			return admission.Allowed("pod template already injected at the owner"), ResultUnchanged
		}
		name := obj.Metadata.Name
		if name == "" {
			// The API server generates the name after admission: the ConfigMaps of §5 are named
			// after the prefix (documented in docs/injector.md).
			name = strings.TrimSuffix(obj.Metadata.GenerateName, "-")
			warnings = append(warnings, fmt.Sprintf("kagenti-injector: %s created with generateName: the optional ConfigMaps mounted are named after %q, not after the generated name", gk.Kind, name))
		}
		_, injectedBefore := tmpl.Annotations[inject.AnnotationStatus]
		fresh = !injectedBefore
		var opts inject.Options
		opts, err = inject.ParseOptions(name, obj.Metadata.Labels, obj.Metadata.Annotations)
		opts.ReadTemplate(tmpl)
		if err == nil && opts.Interception == "" {
			err = h.namespaceInterception(req.Namespace, &opts)
		}
		if err == nil {
			if rendered, err = h.renders.Render(h.Config(), opts); err == nil {
				out, changed, err = inject.Inject(tmpl, rendered)
			}
		}
	}
	if err == nil && rendered != nil {
		if w := h.podSecurityWarning(req.Namespace, gk.Kind, displayName(&obj), out); w != "" {
			warnings = append(warnings, w)
		}
	}
	var (
		bad      *inject.InvalidError
		conflict *inject.PortConflictError
		identity *inject.ProxyIdentityError
		proxyEnv *inject.ProxyEnvError
	)
	switch {
	case errors.As(err, &bad):
		return deny(req, gk.Kind, &obj, err.Error())
	case errors.As(err, &conflict), errors.As(err, &identity), errors.As(err, &proxyEnv):
		// Both name a field of the pod template: rooted at the object here.
		return deny(req, gk.Kind, &obj, strings.Join(path, ".")+"."+err.Error())
	case err != nil:
		return admission.Errored(http.StatusBadRequest, err), ResultError
	case !changed:
		if result == ResultMutated {
			result = ResultUnchanged
		}
		return admission.Allowed("").WithWarnings(warnings...), result
	}
	var resp admission.Response
	if fresh {
		if ops, ok := appendPatch("/"+strings.Join(path, "/"), hasMetadata, tmpl, out); ok {
			resp, err = patchResponse(ops, rendered, patch)
		}
	}
	if resp.Patch == nil && err == nil {
		resp, err = templatePatch(path, before, out, patch)
	}
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), ResultError
	}
	return resp.WithWarnings(warnings...), ResultMutated
}

// deny refuses the request with msg, unless it is an UPDATE that changes nothing the injector reads
// (kagenti.io labels and annotations, the pod template): such an update did not cause the problem —
// a controller removing a finalizer or an owner reference, another tool's label, or any update of an
// object stored before the injector knew better (before an upgrade, before a configuration change).
// Refusing it would block deletion and garbage collection; it is admitted unchanged, with msg as a
// warning, and the first update that does change those inputs is refused.
func deny(req admission.Request, kind string, obj *workload, msg string) (admission.Response, string) {
	if req.Operation == admissionv1.Update && inputsUnchanged(req.OldObject.Raw, kind, obj) {
		return admission.Allowed("").WithWarnings("kagenti-injector: " + msg +
			" (admitted unchanged, as this update changes no kagenti.io label, annotation or pod template field; the next update that does is refused)"), ResultUnchanged
	}
	return admission.Denied(msg), ResultDenied
}

// inputsUnchanged reports whether the stored object old (raw JSON) has the same kagenti.io labels
// and annotations as obj, and the same pod template byte for byte (the API server encodes both
// objects alike, so an update that leaves the template alone leaves its bytes alone).
func inputsUnchanged(old []byte, kind string, obj *workload) bool {
	if len(old) == 0 {
		return false
	}
	var prev workload
	if err := decode(old, &prev); err != nil {
		return false
	}
	oldTmpl, _ := prev.podTemplate(kind)
	newTmpl, _ := obj.podTemplate(kind)
	return bytes.Equal(oldTmpl, newTmpl) &&
		maps.Equal(kagentiKeys(prev.Metadata.Labels), kagentiKeys(obj.Metadata.Labels)) &&
		maps.Equal(kagentiKeys(prev.Metadata.Annotations), kagentiKeys(obj.Metadata.Annotations))
}

// displayName is the object's name, or its generateName prefix when the name is still to be generated.
func displayName(w *workload) string {
	if w.Metadata.Name == "" {
		return w.Metadata.GenerateName
	}
	return w.Metadata.Name
}

// kagentiKeys returns the entries of m whose key is in the kagenti.io/ prefix.
func kagentiKeys(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if strings.HasPrefix(k, "kagenti.io/") {
			out[k] = v
		}
	}
	return out
}

// templatePatch is the JSON Patch from the pod template before (as in the request) to after, with
// the operations' paths rooted at the object. Only the template is diffed: nothing else of the object
// (metadata.managedFields included) can ever be part of the patch, and the diff does not pay for the
// rest of the object.
func templatePatch(path []string, before json.RawMessage, after *corev1.PodTemplateSpec, patch *bytes.Buffer) (admission.Response, error) {
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
	return patchResponse(ops, nil, patch)
}

// patchResponse allows with ops, encoded here (resp.Patch) rather than left to controller-runtime
// (resp.Patches, encoded by Response.Complete after Handle returned): there encoding/json validates
// and compacts again what each operation's MarshalJSON wrote, which was 41 % of the CPU of the whole
// HTTP path, and that time fell outside the handler's histogram.
// The patch is encoded into dst when not nil (see handleInto), into a slice of its own otherwise.
func patchResponse(ops []jsonpatch.Operation, r *inject.Rendered, dst *bytes.Buffer) (admission.Response, error) {
	resp := admission.Allowed("")
	if len(ops) == 0 {
		return resp, nil
	}
	patch, err := encodePatch(ops, r, dst)
	if err != nil {
		return admission.Response{}, err
	}
	resp.Patch = patch
	pt := admissionv1.PatchTypeJSONPatch
	resp.PatchType = &pt
	return resp, nil
}

// injectedByOwner reports whether the template already carries an injection and the object is
// controlled by another object (which was injected itself).
func injectedByOwner(w *workload, t *corev1.PodTemplateSpec) bool {
	if _, ok := t.Annotations[inject.AnnotationStatus]; !ok {
		return false
	}
	return w.Metadata.controlled()
}

func served(gk schema.GroupKind) bool {
	for _, k := range Kinds {
		if k == gk {
			return true
		}
	}
	return false
}

// namespaceInterception sets the interception mode of a workload without a label of its own from
// its namespace's label kagenti.io/interception, as the injector's watch of Namespaces last saw it
// (no API call: a namespace labelled a moment ago may still be read without it). A value other than
// transparent or proxy is an *inject.InvalidError naming the namespace.
func (h *Handler) namespaceInterception(namespace string, o *inject.Options) error {
	ni, ok := h.PodSecurity.(NamespaceInterception)
	if !ok {
		return nil
	}
	mode, ok := ni.Interception(namespace)
	if !ok {
		return nil
	}
	switch mode {
	case config.InterceptionTransparent, config.InterceptionProxy:
		o.Interception = mode
		return nil
	}
	return &inject.InvalidError{Key: fmt.Sprintf("label %s of namespace %q", inject.LabelInterception, namespace), Value: mode,
		Reason: fmt.Sprintf("accepted values: %s, %s (or label the workload itself)", config.InterceptionTransparent, config.InterceptionProxy)}
}
