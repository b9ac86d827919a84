package migrate

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	cardv1 "github.com/kagenti/platform/agentcard/api/v1alpha1"
	tracev1 "github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/pkg/duck"
	txv1 "github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// workload is the composition migrate builds around one workload: the workload itself (or the
// labels to add to an existing one) and everything that targets it.
type workload struct {
	kind, namespace, name string
	apiVersion            string

	// full is the whole workload when migrate writes it: made from an Agent, or an input passed
	// through. Without it, the workload exists elsewhere and migrate writes a patch (Object.Patch).
	full      *unstructured.Unstructured
	fromInput bool
	from      []Source
	notes     []string
	// addLabels are set on the workload (kagenti.io/inject, kagenti.io/type).
	addLabels map[string]string
	// skills are image volumes an AgentRuntime mounts into the agent container.
	skills    []skillMount
	container string // the agent container the skills go to (patches need its name)

	extras []*Object // ServiceAccount, Role, RoleBinding, Service
	build  *buildInput
	tx     *pillarOut[txv1.TokenExchangeSpec]
	trace  *pillarOut[tracev1.AgentTraceSpec]
	card   *pillarOut[cardv1.AgentCardSpec]
}

type skillMount struct {
	volume corev1.Volume
	mount  corev1.VolumeMount
}

// pillarOut is a pillar CR being assembled from one or more legacy objects.
type pillarOut[S any] struct {
	name, namespace string
	spec            S
	from            []Source
	notes           []string
	labels          map[string]string
	annotations     map[string]string
}

func (p *pillarOut[S]) addSource(s Source) {
	for _, f := range p.from {
		if f == s {
			return
		}
	}
	p.from = append(p.from, s)
}

func (p *pillarOut[S]) madeFrom(s Source) bool {
	for _, f := range p.from {
		if f == s {
			return true
		}
	}
	return false
}

func (w *workload) targetRef() duck.TargetRef {
	ref := duck.TargetRef{Kind: w.kind, Name: w.name, APIVersion: w.apiVersion}
	if ref.APIVersion == "" {
		ref.Default()
	}
	return ref
}

func (w *workload) tokenExchange(src Source) *pillarOut[txv1.TokenExchangeSpec] {
	if w.tx == nil {
		w.tx = &pillarOut[txv1.TokenExchangeSpec]{name: w.name + "-auth", namespace: w.namespace}
		w.tx.spec.TargetRef = w.targetRef()
	}
	w.tx.addSource(src)
	return w.tx
}

func (w *workload) agentTrace(src Source) *pillarOut[tracev1.AgentTraceSpec] {
	if w.trace == nil {
		w.trace = &pillarOut[tracev1.AgentTraceSpec]{name: w.name + "-trace", namespace: w.namespace}
		w.trace.spec.TargetRef = w.targetRef()
	}
	w.trace.addSource(src)
	return w.trace
}

func (w *workload) cardFor(_ *migrator, src Source) *pillarOut[cardv1.AgentCardSpec] {
	if w.card == nil {
		w.card = &pillarOut[cardv1.AgentCardSpec]{name: w.name + "-card", namespace: w.namespace}
		ref := w.targetRef()
		w.card.spec.TargetRef = &ref
	}
	w.card.addSource(src)
	return w.card
}

// objects returns what migrate writes for this workload, in apply order.
func (w *workload) objects() ([]*Object, error) {
	out := append([]*Object(nil), w.extras...)
	wl, err := w.workloadObject()
	if err != nil {
		return nil, err
	}
	if wl != nil {
		out = append(out, wl)
	}
	if w.build != nil {
		obj, err := w.build.object()
		if err != nil {
			return nil, err
		}
		w.build.emitted = true
		out = append(out, obj)
	}
	for _, p := range []interface {
		object() (*Object, error)
	}{pillarObject(w.tx, "TokenExchange", txv1.GroupVersion.String()), pillarObject(w.trace, "AgentTrace", tracev1.GroupVersion.String()), pillarObject(w.card, "AgentCard", cardv1.GroupVersion.String())} {
		obj, err := p.object()
		if err != nil {
			return nil, err
		}
		if obj != nil {
			out = append(out, obj)
		}
	}
	return out, nil
}

func (w *workload) workloadObject() (*Object, error) {
	if w.full == nil && len(w.addLabels) == 0 && len(w.skills) == 0 {
		return nil, nil
	}
	if w.full == nil {
		return w.patch()
	}
	u := w.full.DeepCopy()
	labels := u.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range w.addLabels {
		labels[k] = v
	}
	u.SetLabels(labels)
	if len(w.skills) > 0 {
		if err := addSkills(u, w.kind, w.container, w.skills); err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", w.kind, w.namespace, w.name, err)
		}
	}
	notes := w.notes
	if w.fromInput && len(notes) == 0 {
		notes = []string{"passed through unchanged"}
	}
	return &Object{Unstructured: u, From: w.from, Notes: notes}, nil
}

// patch is an apply configuration for a workload migrate did not read: only the labels (and skill
// volumes) it must carry. Applied server-side, it changes nothing else of the workload.
func (w *workload) patch() (*Object, error) {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	ref := w.targetRef()
	u.SetAPIVersion(ref.APIVersion)
	u.SetKind(w.kind)
	u.SetName(w.name)
	u.SetNamespace(w.namespace)
	if len(w.addLabels) > 0 {
		u.SetLabels(w.addLabels)
	}
	if len(w.skills) > 0 {
		if err := addSkills(u, w.kind, w.container, w.skills); err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", w.kind, w.namespace, w.name, err)
		}
	}
	notes := append([]string{"apply configuration for the existing workload: only these fields change (kubectl apply --server-side)"}, w.notes...)
	return &Object{Unstructured: u, From: w.from, Patch: true, Notes: notes}, nil
}

// addSkills adds image volumes and their read-only mounts in the named container to the pod template
// of u (spec.template, or spec.jobTemplate.spec.template for a CronJob).
func addSkills(u *unstructured.Unstructured, kind, container string, skills []skillMount) error {
	tmplPath := []string{"spec", "template", "spec"}
	if kind == "CronJob" {
		tmplPath = []string{"spec", "jobTemplate", "spec", "template", "spec"}
	}
	volumes, _, _ := unstructured.NestedSlice(u.Object, append(tmplPath, "volumes")...)
	containers, _, _ := unstructured.NestedSlice(u.Object, append(tmplPath, "containers")...)
	idx := -1
	for i, c := range containers {
		if m, ok := c.(map[string]any); ok && m["name"] == container {
			idx = i
		}
	}
	if idx < 0 {
		containers = append(containers, map[string]any{"name": container})
		idx = len(containers) - 1
	}
	c := containers[idx].(map[string]any)
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	for _, s := range skills {
		v, err := toMap(s.volume)
		if err != nil {
			return err
		}
		mnt, err := toMap(s.mount)
		if err != nil {
			return err
		}
		volumes = append(volumes, v)
		mounts = append(mounts, mnt)
	}
	c["volumeMounts"] = mounts
	if err := unstructured.SetNestedSlice(u.Object, volumes, append(tmplPath, "volumes")...); err != nil {
		return err
	}
	return unstructured.SetNestedSlice(u.Object, containers, append(tmplPath, "containers")...)
}

type objecter interface{ object() (*Object, error) }

type pillarObj[S any] struct {
	p          *pillarOut[S]
	kind       string
	apiVersion string
}

func pillarObject[S any](p *pillarOut[S], kind, apiVersion string) objecter {
	return pillarObj[S]{p: p, kind: kind, apiVersion: apiVersion}
}

func (o pillarObj[S]) object() (*Object, error) {
	if o.p == nil {
		return nil, nil
	}
	doc := struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              S `json:"spec"`
	}{
		TypeMeta:   metav1.TypeMeta{APIVersion: o.apiVersion, Kind: o.kind},
		ObjectMeta: metav1.ObjectMeta{Name: o.p.name, Namespace: o.p.namespace, Labels: nilIfEmpty(o.p.labels), Annotations: nilIfEmpty(o.p.annotations)},
		Spec:       o.p.spec,
	}
	m, err := toMap(doc)
	if err != nil {
		return nil, err
	}
	return &Object{Unstructured: &unstructured.Unstructured{Object: m}, From: o.p.from, Notes: o.p.notes}, nil
}

// toUnstructured converts a typed object through JSON (so that custom marshalers apply) and drops
// what a new object must not carry: status, and the null creationTimestamps of typed metadata.
func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := toMap(obj)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	return &unstructured.Unstructured{Object: m}, nil
}

func toMap(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := utiljson.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	dropNullTimestamps(m)
	return m, nil
}

func dropNullTimestamps(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if k == "creationTimestamp" && e == nil {
				delete(t, k)
				continue
			}
			dropNullTimestamps(e)
			if k == "metadata" || k == "resources" {
				if mm, ok := t[k].(map[string]any); ok && len(mm) == 0 {
					delete(t, k)
				}
			}
		}
	case []any:
		for _, e := range t {
			dropNullTimestamps(e)
		}
	}
}
