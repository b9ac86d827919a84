package kit

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/duck"
)

func TestTrimWorkloadEveryBuiltinKind(t *testing.T) {
	keepMetadata := func(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: t.ObjectMeta}
	}
	trim := TrimWorkload(keepMetadata)
	for kind, obj := range builtinObjects() {
		t.Run(kind, func(t *testing.T) {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			require.NoError(t, err)
			in := &unstructured.Unstructured{Object: m}
			in.SetGroupVersionKind(gvkOf(kind))
			in.SetAnnotations(map[string]string{lastApplied: `{"a":"copy"}`, "keep": "me"})
			in.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl"}})
			before, err := duck.NewWorkload(in.DeepCopy())
			require.NoError(t, err)
			wantSel, err := before.Selector()
			require.NoError(t, err)

			out, err := trim(in)
			require.NoError(t, err)
			w, err := duck.NewWorkload(out.(*unstructured.Unstructured))
			require.NoError(t, err)
			assert.Equal(t, gvkOf(kind), w.GroupVersionKind())
			assert.Equal(t, "agent", w.Name())
			assert.Equal(t, map[string]string{"keep": "me"}, w.Object().GetAnnotations(), "kubectl's last-applied copy is dropped")
			assert.Empty(t, w.Object().GetManagedFields())
			sel, err := w.Selector()
			require.NoError(t, err)
			assert.Equal(t, wantSel.String(), sel.String())
			tmpl, err := w.PodTemplate()
			require.NoError(t, err)
			assert.Equal(t, podLabels, tmpl.Labels)
			assert.Empty(t, tmpl.Spec.Containers, "slim decides what of the template stays")
			_, hasStatus := w.Object().Object["status"]
			assert.False(t, hasStatus)
		})
	}
}

func TestTrimWorkloadLeavesOtherObjectsAlone(t *testing.T) {
	trim := TrimWorkload(func(t corev1.PodTemplateSpec) corev1.PodTemplateSpec { return t })
	noTemplate := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "x"}}}
	out, err := trim(noTemplate)
	require.NoError(t, err)
	assert.Same(t, noTemplate, out)
	p := &corev1.Pod{}
	out, err = trim(p)
	require.NoError(t, err)
	assert.Same(t, p, out)
}

func TestTrimmedWorkloadsCoversTheBuiltinKinds(t *testing.T) {
	by := TrimmedWorkloads(func(t corev1.PodTemplateSpec) corev1.PodTemplateSpec { return t })
	assert.Len(t, by, len(duck.BuiltinKinds()))
	for o, b := range by {
		gvks, _, err := clientgoscheme.Scheme.ObjectKinds(o)
		require.NoError(t, err)
		assert.Contains(t, duck.BuiltinKinds(), gvks[0])
		assert.IsType(t, duck.NewBuiltinObject(gvks[0]), o, "typed, as the controllers watch them")
		assert.NotNil(t, b.Transform)
	}
}

func TestTrimWorkloadTypedEveryBuiltinKind(t *testing.T) {
	keepMetadata := func(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: t.ObjectMeta}
	}
	trim := TrimWorkload(keepMetadata)
	for kind, obj := range builtinObjects() {
		t.Run(kind, func(t *testing.T) {
			in := obj.(client.Object)
			in.SetAnnotations(map[string]string{lastApplied: `{"a":"copy"}`, "keep": "me"})
			in.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl"}})
			before, err := duck.NewWorkloadFromObject(in.DeepCopyObject(), gvkOf(kind))
			require.NoError(t, err)
			wantSel, err := before.Selector()
			require.NoError(t, err)

			out, err := trim(in)
			require.NoError(t, err)
			assert.IsType(t, duck.NewBuiltinObject(gvkOf(kind)), out, "trimmed into its own type")
			assert.Len(t, in.GetAnnotations(), 2, "the object trimmed is left as it was")
			w, err := duck.NewWorkloadFromObject(out.(client.Object), gvkOf(kind))
			require.NoError(t, err)
			assert.Equal(t, "agent", w.Name())
			assert.EqualValues(t, "uid-1", w.UID())
			assert.Equal(t, map[string]string{"keep": "me"}, w.Object().GetAnnotations(), "kubectl's last-applied copy is dropped")
			assert.Empty(t, w.Object().GetManagedFields())
			sel, err := w.Selector()
			require.NoError(t, err)
			assert.Equal(t, wantSel.String(), sel.String())
			tmpl, err := w.PodTemplate()
			require.NoError(t, err)
			assert.Equal(t, podLabels, tmpl.Labels)
			assert.Empty(t, tmpl.Spec.Containers, "slim decides what of the template stays")
			assert.Empty(t, reflect.ValueOf(out).Elem().FieldByName("Status").Interface(), "no status")
		})
	}
}

func TestNewBuiltinObject(t *testing.T) {
	for _, gvk := range duck.BuiltinKinds() {
		o := duck.NewBuiltinObject(gvk)
		require.NotNil(t, o, gvk.String())
		gvks, _, err := clientgoscheme.Scheme.ObjectKinds(o)
		require.NoError(t, err)
		assert.Equal(t, []schema.GroupVersionKind{gvk}, gvks)
	}
	assert.Nil(t, duck.NewBuiltinObject(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "AgentSet"}))
	assert.Nil(t, duck.NewBuiltinObject(schema.GroupVersionKind{Group: "apps", Version: "v1beta2", Kind: "Deployment"}))
}

// TestTemplateMetaPresence: the labels stay, the annotation read for its presence stays present
// (with no value, in a map shared by every template), everything else of the metadata goes.
func TestTemplateMetaPresence(t *testing.T) {
	const marker = "kagenti.io/status"
	injected := metav1.ObjectMeta{Name: "n", Labels: map[string]string{"app": "a"},
		Annotations: map[string]string{marker: `{"version":"v1","injected":["envoy-proxy"]}`, "other": "x"}}
	got := TemplateMetaPresence(injected, marker)
	assert.Equal(t, metav1.ObjectMeta{Labels: map[string]string{"app": "a"}, Annotations: map[string]string{marker: ""}}, got)
	_, present := got.Annotations[marker]
	assert.True(t, present)

	other := TemplateMetaPresence(metav1.ObjectMeta{Annotations: map[string]string{marker: "y"}}, marker)
	assert.Equal(t, reflect.ValueOf(got.Annotations).UnsafePointer(), reflect.ValueOf(other.Annotations).UnsafePointer(),
		"one map for every template that carries it")

	plain := TemplateMetaPresence(metav1.ObjectMeta{Labels: map[string]string{"app": "b"}, Annotations: map[string]string{"other": "x"}}, marker)
	assert.Nil(t, plain.Annotations, "a template without it has no annotations")
	assert.Equal(t, map[string]string{"app": "b"}, plain.Labels)
}

func TestCompactObjectDropsWhatNoControllerReads(t *testing.T) {
	conds := make([]metav1.Condition, 2, 8)
	conds[0] = metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Configured"}
	conds[1] = metav1.Condition{Type: "TargetResolved", Status: metav1.ConditionFalse, Reason: "NotFound", Message: "no Deployment web"}
	g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", Labels: map[string]string{"app": "web"},
		Annotations:   map[string]string{lastApplied: `{"spec":{}}`, "keep": "me"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	g.Status.Conditions = conds
	g.Status.ObservedGeneration = 3
	want := g.DeepCopyObject().(*gadget)

	out, err := CompactObject(g)
	require.NoError(t, err)
	require.Same(t, g, out)
	assert.Nil(t, g.ManagedFields)
	assert.Equal(t, map[string]string{"keep": "me"}, g.Annotations)
	assert.Equal(t, want.Labels, g.Labels)
	assert.Equal(t, want.Status, g.Status, "the status stays, conditions and all")
	assert.Equal(t, 2, cap(g.Status.Conditions), "conditions held in a slice of their number")

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{lastApplied: "{}"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	out, err = CompactObject(cm)
	require.NoError(t, err)
	assert.Same(t, cm, out)
	assert.Len(t, cm.ManagedFields, 1, "an object that is not a duck.Object passes through")
	assert.Contains(t, cm.Annotations, lastApplied)
}
