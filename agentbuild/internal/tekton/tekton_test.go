package tekton

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
)

// TestTaskSpecHasExactlyTektonsFields: step ConfigMaps are decoded strictly into TaskSpec, so it
// must accept every field Tekton's TaskSpec accepts and no other, at every depth.
func TestTaskSpecHasExactlyTektonsFields(t *testing.T) {
	compareFields(t, reflect.TypeFor[TaskSpec](), reflect.TypeFor[pipelinev1.TaskSpec](), "TaskSpec", true)
}

// TestPartialTypesAreTektons: every field of the Pipeline and PipelineRun types is a field of
// Tekton's, with the same JSON name and shape, at every depth.
func TestPartialTypesAreTektons(t *testing.T) {
	compareFields(t, reflect.TypeFor[Pipeline](), reflect.TypeFor[pipelinev1.Pipeline](), "Pipeline", false)
	compareFields(t, reflect.TypeFor[PipelineRun](), reflect.TypeFor[pipelinev1.PipelineRun](), "PipelineRun", false)
	assert.Equal(t, pipelinev1.SchemeGroupVersion, GroupVersion)
	assert.Equal(t, string(pipelinev1.PipelineRunSpecStatusCancelled), PipelineRunSpecStatusCancelled)
	assert.Equal(t, string(apis.ConditionSucceeded), ConditionSucceeded)
	assert.Equal(t, string(pipelinev1.ParamTypeString), string(ParamTypeString))
}

// compareFields checks that ours and theirs have the same JSON fields (exact) or that ours' fields
// are a subset of theirs', recursing into fields whose types are not shared.
func compareFields(t *testing.T, ours, theirs reflect.Type, path string, exact bool) {
	t.Helper()
	ours, theirs = deref(ours), deref(theirs)
	if ours == theirs {
		return // a type both use, e.g. corev1.EnvVar
	}
	if ours.Kind() != theirs.Kind() {
		t.Errorf("%s: ours is a %s, Tekton's a %s (%s)", path, ours.Kind(), theirs.Kind(), theirs)
		return
	}
	switch ours.Kind() {
	case reflect.Slice, reflect.Map:
		compareFields(t, ours.Elem(), theirs.Elem(), path+"[]", exact)
		return
	case reflect.Struct:
	default:
		return // string, bool, int…: named types of the same kind
	}
	if marshals(ours) || marshals(theirs) {
		if marshals(ours) != marshals(theirs) {
			t.Errorf("%s: only one of ours (%s) and Tekton's (%s) marshals itself", path, ours, theirs)
		}
		return // ParamValue: its JSON is checked by TestParamValueDecodesAsTektons
	}
	of, tf := jsonFields(ours), jsonFields(theirs)
	for name, f := range of {
		g, ok := tf[name]
		if !ok {
			t.Errorf("%s.%s: Tekton's %s has no such field", path, name, theirs)
			continue
		}
		if f.omitempty != g.omitempty {
			t.Errorf("%s.%s: omitempty %v, Tekton's %v", path, name, f.omitempty, g.omitempty)
		}
		compareFields(t, f.typ, g.typ, path+"."+name, exact)
	}
	if exact {
		for name := range tf {
			if _, ok := of[name]; !ok {
				t.Errorf("%s.%s: Tekton's %s has this field, ours does not", path, name, theirs)
			}
		}
	}
}

type jsonField struct {
	typ       reflect.Type
	omitempty bool
}

// jsonFields lists a struct's JSON fields, inline and embedded structs flattened.
func jsonFields(st reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for i := range st.NumField() {
		f := st.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" && (f.Anonymous || strings.Contains(opts, "inline")) && deref(f.Type).Kind() == reflect.Struct && !marshals(deref(f.Type)) {
			for k, v := range jsonFields(deref(f.Type)) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = jsonField{typ: f.Type, omitempty: strings.Contains(opts, "omitempty")}
	}
	return out
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func marshals(t reflect.Type) bool {
	m := reflect.TypeFor[json.Marshaler]()
	return t.Implements(m) || reflect.PointerTo(t).Implements(m)
}

// TestParamValueDecodesAsTektons: a parameter or result value reads and writes as Tekton's does,
// for every JSON shape.
func TestParamValueDecodesAsTektons(t *testing.T) {
	for _, in := range []string{`"a"`, `""`, `["a","b"]`, `[]`, `{"k":"v"}`, `{}`, `1`, `true`, `null`, `[1,2]`, `{"k":1}`, `[["a"]]`, ` "spaced" `} {
		var ours ParamValue
		var theirs pipelinev1.ParamValue
		require.NoError(t, json.Unmarshal([]byte(in), &ours), in)
		require.NoError(t, json.Unmarshal([]byte(in), &theirs), in)
		assert.Equal(t, string(theirs.Type), string(ours.Type), in)
		assert.Equal(t, theirs.StringVal, ours.StringVal, in)
		assert.Equal(t, theirs.ArrayVal, ours.ArrayVal, in)
		assert.Equal(t, theirs.ObjectVal, ours.ObjectVal, in)
		a, errA := json.Marshal(ours)
		b, errB := json.Marshal(theirs)
		require.NoError(t, errA, in)
		require.NoError(t, errB, in)
		assert.JSONEq(t, string(b), string(a), in)
	}
	// Inside a struct, strict decoding reaches the same verdict for a default of every shape.
	for _, in := range []string{`{"name":"p","default":"x"}`, `{"name":"p","default":["x"]}`, `{"name":"p","default":{"k":"v"}}`, `{"name":"p","default":7}`} {
		var ours ParamSpec
		var theirs pipelinev1.ParamSpec
		errOurs, errTheirs := strictUnmarshal(in, &ours), strictUnmarshal(in, &theirs)
		assert.Equal(t, errTheirs == nil, errOurs == nil, "%s: ours %v, Tekton's %v", in, errOurs, errTheirs)
	}
}

// TestPipelineRunReadsAsTektons: a run as Tekton writes it (every status field it has, results of
// every type) reads back through PipelineRun with the same outcome.
func TestPipelineRunReadsAsTektons(t *testing.T) {
	start, end := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), metav1.NewTime(time.Date(2026, 1, 1, 0, 5, 0, 0, time.UTC))
	cases := map[string]func(*pipelinev1.PipelineRun){
		"not started": func(*pipelinev1.PipelineRun) {},
		"running": func(pr *pipelinev1.PipelineRun) {
			pr.Status.StartTime = &start
			pr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionUnknown, Reason: "Running"})
		},
		"cancelled while running": func(pr *pipelinev1.PipelineRun) {
			pr.Spec.Status = pipelinev1.PipelineRunSpecStatusCancelled
			pr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionUnknown, Reason: "Running"})
		},
		"failed": func(pr *pipelinev1.PipelineRun) {
			pr.Status.StartTime, pr.Status.CompletionTime = &start, &end
			pr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionFalse, Reason: "Failed", Message: "Tasks Completed: 2 (Failed: 1)"})
		},
		"succeeded": func(pr *pipelinev1.PipelineRun) {
			pr.Status.StartTime, pr.Status.CompletionTime = &start, &end
			pr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionTrue, Reason: "Succeeded"})
			pr.Status.Results = []pipelinev1.PipelineRunResult{
				{Name: "IMAGE_URL", Value: *pipelinev1.NewStructuredValues("r/a:1")},
				{Name: "TAGS", Value: *pipelinev1.NewStructuredValues("a", "b")},
				{Name: "META", Value: *pipelinev1.NewObject(map[string]string{"k": "v"})},
			}
			pr.Status.ChildReferences = []pipelinev1.ChildStatusReference{{Name: "tr", PipelineTaskName: "build"}}
			pr.Status.PipelineSpec = &pipelinev1.PipelineSpec{Tasks: []pipelinev1.PipelineTask{{Name: "build", TaskRef: &pipelinev1.TaskRef{Name: "x"}}}}
		},
	}
	for name, mutate := range cases {
		theirs := &pipelinev1.PipelineRun{
			TypeMeta:   metav1.TypeMeta{APIVersion: "tekton.dev/v1", Kind: "PipelineRun"},
			ObjectMeta: metav1.ObjectMeta{Name: "b-1", Namespace: "ns"},
			Spec:       pipelinev1.PipelineRunSpec{PipelineRef: &pipelinev1.PipelineRef{Name: "b-1"}},
		}
		mutate(theirs)
		data, err := json.Marshal(theirs)
		require.NoError(t, err)
		ours := &PipelineRun{}
		require.NoError(t, json.Unmarshal(data, ours), name)
		assert.Equal(t, theirs.IsDone(), ours.IsDone(), name)
		assert.Equal(t, theirs.IsCancelled(), ours.IsCancelled(), name)
		if c := theirs.Status.GetCondition(apis.ConditionSucceeded); c != nil {
			require.NotNil(t, ours.Succeeded(), name)
			assert.Equal(t, Condition{Type: string(c.Type), Status: c.Status, Reason: c.Reason, Message: c.Message}, *ours.Succeeded(), name)
		} else {
			assert.Nil(t, ours.Succeeded(), name)
		}
		assert.True(t, theirs.Status.StartTime.Equal(ours.Status.StartTime), "%s: start %v, Tekton's %v", name, ours.Status.StartTime, theirs.Status.StartTime)
		assert.True(t, theirs.Status.CompletionTime.Equal(ours.Status.CompletionTime), "%s: completion %v, Tekton's %v", name, ours.Status.CompletionTime, theirs.Status.CompletionTime)
		require.Len(t, ours.Status.Results, len(theirs.Status.Results), name)
		for i, r := range theirs.Status.Results {
			assert.Equal(t, r.Name, ours.Status.Results[i].Name)
			assert.Equal(t, string(r.Value.Type), string(ours.Status.Results[i].Value.Type))
			assert.Equal(t, r.Value.StringVal, ours.Status.Results[i].Value.StringVal)
			assert.Equal(t, r.Value.ArrayVal, ours.Status.Results[i].Value.ArrayVal)
			assert.Equal(t, r.Value.ObjectVal, ours.Status.Results[i].Value.ObjectVal)
		}
		assert.Equal(t, theirs.Spec.PipelineRef.Name, ours.Spec.PipelineRef.Name)
	}
}

func strictUnmarshal(in string, into any) error {
	d := json.NewDecoder(strings.NewReader(in))
	d.DisallowUnknownFields()
	return d.Decode(into)
}
