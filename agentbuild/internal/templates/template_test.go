package templates

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/params"
	"github.com/kagenti/platform/agentbuild/internal/testsupport"
)

func TestParseTemplate(t *testing.T) {
	tpl, err := ParseTemplate([]byte(`
description: d
parameters: [{name: REGISTRY, value: r}]
requiredParameters: [IMAGE]
steps: [{name: clone, configMap: step-git-clone}, {name: build, configMap: step-build, enabled: false}]
`))
	require.NoError(t, err)
	assert.Equal(t, []params.Param{{Name: "REGISTRY", Value: "r"}}, tpl.Parameters)
	assert.False(t, tpl.Steps[1].IsEnabled())

	for in, want := range map[string]string{
		"stepz: []":                        `unknown field "stepz"`,
		"steps: [{name: A, configMap: x}]": `steps[0].name "A"`,
		"steps: [{name: a, configMap: x}, {name: a, configMap: y}]": `steps[1].name "a" is not unique`,
		"steps: [{name: a}]": "steps[0] (a) needs configMap",
	} {
		_, err := ParseTemplate([]byte(in))
		assert.ErrorContains(t, err, want, in)
	}
}

func TestParseTaskSpec(t *testing.T) {
	_, err := ParseTaskSpec([]byte("steps: [{name: s, image: busybox:1.37}]"))
	require.NoError(t, err)
	_, err = ParseTaskSpec([]byte("params: []"))
	assert.ErrorContains(t, err, "at least one step")
	_, err = ParseTaskSpec([]byte("stepz: []"))
	assert.ErrorContains(t, err, `unknown field "stepz"`)
}

func TestMergeSteps(t *testing.T) {
	tmpl := []Step{
		{Name: "clone", ConfigMap: "step-git-clone"},
		{Name: "build", ConfigMap: "step-buildah-build", Parameters: []params.Param{{Name: "A", Value: "tmpl"}}},
		{Name: "scan", ConfigMap: "step-trivy-scan"},
	}
	got := MergeSteps(tmpl, []v1alpha1.PipelineStep{
		{Name: "build", ConfigMap: "my-kaniko", Parameters: []v1alpha1.Parameter{{Name: "A", Value: "user"}}},
		{Name: "scan", Enabled: ptr.To(false)},
		{Name: "notify", ConfigMap: "step-notify"},
	})
	assert.Equal(t, []Step{
		{Name: "clone", ConfigMap: "step-git-clone"},
		{Name: "build", ConfigMap: "my-kaniko", Parameters: []params.Param{{Name: "A", Value: "user"}, {Name: "A", Value: "tmpl"}}},
		{Name: "scan", ConfigMap: "step-trivy-scan", Enabled: ptr.To(false), Parameters: []params.Param{}},
		{Name: "notify", ConfigMap: "step-notify", Parameters: []params.Param{}},
	}, got)
	assert.Equal(t, []params.Param{{Name: "A", Value: "tmpl"}}, tmpl[1].Parameters, "the template is not modified")
}

// TestParseTaskSpecAsTekton: ParseTaskSpec accepts exactly what strict decoding into Tekton's own
// TaskSpec accepts, and keeps the same content, for every shipped step and for unknown fields
// planted at every depth of them.
func TestParseTaskSpecAsTekton(t *testing.T) {
	plant := []struct {
		name string
		at   func(ts map[string]any) bool // plants "bogus: 1"; false when the step has no such place
	}{
		{"nowhere", func(map[string]any) bool { return true }},
		{"top level", func(ts map[string]any) bool { ts["bogus"] = 1; return true }},
		{"step", func(ts map[string]any) bool { return plantIn(ts, "steps") }},
		{"param", func(ts map[string]any) bool { return plantIn(ts, "params") }},
		{"workspace", func(ts map[string]any) bool { return plantIn(ts, "workspaces") }},
		{"result", func(ts map[string]any) bool { return plantIn(ts, "results") }},
		{"stepTemplate", func(ts map[string]any) bool {
			st, ok := ts["stepTemplate"].(map[string]any)
			if ok {
				st["bogus"] = 1
			}
			return ok
		}},
		{"step env var", func(ts map[string]any) bool {
			env, _ := first(ts, "steps")["env"].([]any)
			if len(env) == 0 {
				return false
			}
			env[0].(map[string]any)["bogus"] = 1
			return true
		}},
		{"step securityContext", func(ts map[string]any) bool {
			sc, ok := first(ts, "steps")["securityContext"].(map[string]any)
			if ok {
				sc["bogus"] = 1
			}
			return ok
		}},
		{"sidecar", func(ts map[string]any) bool {
			ts["sidecars"] = []any{map[string]any{"name": "s", "image": "busybox:1.37", "bogus": 1}}
			return true
		}},
		{"valid sidecar, when and step results", func(ts map[string]any) bool {
			ts["sidecars"] = []any{map[string]any{"name": "s", "image": "busybox:1.37", "readinessProbe": map[string]any{"exec": map[string]any{"command": []any{"true"}}}}}
			s := first(ts, "steps")
			s["when"] = []any{map[string]any{"input": "a", "operator": "in", "values": []any{"a"}}}
			s["results"] = []any{map[string]any{"name": "r", "type": "object", "properties": map[string]any{"k": map[string]any{"type": "string"}}}}
			return true
		}},
		{"array and object defaults", func(ts map[string]any) bool {
			ts["params"] = append(asList(ts["params"]), map[string]any{"name": "ARR", "type": "array", "default": []any{"a"}},
				map[string]any{"name": "OBJ", "properties": map[string]any{"k": map[string]any{}}, "default": map[string]any{"k": "v"}})
			return true
		}},
	}
	cms := testsupport.DefaultTemplates(t, "x")
	tested := 0
	for _, cm := range cms {
		raw, ok := cm.Data[TaskSpecKey]
		if !ok {
			continue
		}
		for _, p := range plant {
			ts := map[string]any{}
			require.NoError(t, yaml.Unmarshal([]byte(raw), &ts), cm.Name)
			if !p.at(ts) {
				continue
			}
			data, err := yaml.Marshal(ts)
			require.NoError(t, err)
			ours, errOurs := ParseTaskSpec(data)
			var theirs pipelinev1.TaskSpec
			errTheirs := yaml.UnmarshalStrict(data, &theirs)
			tested++
			if !assert.Equal(t, errTheirs == nil, errOurs == nil, "%s, %s: ours %v, Tekton's %v", cm.Name, p.name, errOurs, errTheirs) || errOurs != nil {
				continue
			}
			a, err := json.Marshal(ours)
			require.NoError(t, err)
			b, err := json.Marshal(theirs)
			require.NoError(t, err)
			assert.JSONEq(t, string(b), string(a), "%s, %s", cm.Name, p.name)
		}
	}
	assert.Greater(t, tested, 6*len(plant)/2, "too few step ConfigMaps or plantings")
}

func asList(v any) []any { l, _ := v.([]any); return l }

func first(ts map[string]any, key string) map[string]any {
	if l := asList(ts[key]); len(l) > 0 {
		m, _ := l[0].(map[string]any)
		return m
	}
	return map[string]any{}
}

func plantIn(ts map[string]any, key string) bool {
	if len(asList(ts[key])) == 0 {
		return false
	}
	first(ts, key)["bogus"] = 1
	return true
}
