package resources

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/params"
	"github.com/kagenti/platform/agentbuild/internal/templates"
	"github.com/kagenti/platform/agentbuild/internal/testsupport"
)

const templateNS = "kagenti-system"

// loader serves the real default templates from deploy/ (plus extra ConfigMaps) through a fake client.
func loader(t testing.TB, extra ...*corev1.ConfigMap) *templates.Loader {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	var objs []client.Object
	for _, cm := range testsupport.DefaultTemplates(t, templateNS) {
		objs = append(objs, cm)
	}
	for _, cm := range extra {
		objs = append(objs, cm)
	}
	return &templates.Loader{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(), Namespace: templateNS}
}

func readBuild(t testing.TB, path string) *v1alpha1.AgentBuild {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	b := &v1alpha1.AgentBuild{}
	require.NoError(t, yaml.UnmarshalStrict(data, b))
	return b
}

func render(t testing.TB, l *templates.Loader, b *v1alpha1.AgentBuild) (*Rendered, error) {
	t.Helper()
	loaded, err := l.Load(context.Background(), b)
	if err != nil {
		return nil, err
	}
	return Render(b, loaded)
}

// TestGolden renders the Pipeline and PipelineRun of one AgentBuild per mode with the shipped
// templates. UPDATE_GOLDEN=1 rewrites the golden files; a golden without an input fails.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.input.yaml")
	require.NoError(t, err)
	modes := map[v1alpha1.BuildMode]bool{}
	used := map[string]bool{}
	l := loader(t)
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.yaml")
		golden := filepath.Join("testdata", name+".golden.yaml")
		used[golden] = true
		t.Run(name, func(t *testing.T) {
			b := readBuild(t, in)
			modes[b.Spec.ModeOrDefault()] = true
			r, err := render(t, l, b)
			require.NoError(t, err)
			// Both objects are Tekton's: they decode strictly into Tekton's own types, Tekton's
			// validation (what its admission webhook runs) accepts them, and Tekton's types write
			// them back as the same JSON, so nothing is lost or added on the way to the API server.
			p := &pipelinev1.Pipeline{}
			asTekton(t, r.Pipeline, p)
			if ferr := p.Validate(context.Background()); ferr != nil {
				t.Errorf("Tekton rejects the Pipeline: %v", ferr)
			}
			pr := &pipelinev1.PipelineRun{}
			asTekton(t, r.PipelineRun, pr)
			if ferr := pr.Validate(context.Background()); ferr != nil {
				t.Errorf("Tekton rejects the PipelineRun: %v", ferr)
			}
			got := marshal(t, r)
			if os.Getenv("UPDATE_GOLDEN") != "" {
				require.NoError(t, os.WriteFile(golden, got, 0o644))
				return
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "missing golden file; run with UPDATE_GOLDEN=1")
			assert.Equal(t, string(want), string(got), "rendering changed; run with UPDATE_GOLDEN=1 and review the diff")

			again, err := render(t, l, b)
			require.NoError(t, err)
			assert.Equal(t, string(got), string(marshal(t, again)), "rendering is not deterministic")
		})
	}
	for _, m := range v1alpha1.Modes {
		assert.True(t, modes[m], "no golden input for mode %s", m)
	}
	goldens, err := filepath.Glob("testdata/*.golden.yaml")
	require.NoError(t, err)
	for _, g := range goldens {
		assert.True(t, used[g], "golden file %s has no input; delete it", g)
	}
}

// asTekton decodes ours strictly into Tekton's type theirs and checks that theirs marshals to the
// same JSON.
func asTekton(t *testing.T, ours, theirs any) {
	t.Helper()
	data, err := json.Marshal(ours)
	require.NoError(t, err)
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	require.NoError(t, d.Decode(theirs), "decoding into Tekton's %T", theirs)
	back, err := json.Marshal(theirs)
	require.NoError(t, err)
	assert.JSONEq(t, string(data), string(back), "Tekton's %T writes other JSON", theirs)
}

func marshal(t testing.TB, r *Rendered) []byte {
	t.Helper()
	var buf bytes.Buffer
	for i, o := range []any{r.Pipeline, r.PipelineRun} {
		data, err := yaml.Marshal(o)
		require.NoError(t, err)
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(data)
	}
	return buf.Bytes()
}

func TestRunNameIsDeterministicAndShort(t *testing.T) {
	b := &v1alpha1.AgentBuild{}
	b.Name, b.Generation = "weather-agent", 7
	assert.Equal(t, "weather-agent-7", RunName(b))
	b.Name = strings.Repeat("x", 250)
	n := RunName(b)
	assert.LessOrEqual(t, len(n), 63)
	assert.Equal(t, n, RunName(b))
	b.Generation = 8
	assert.NotEqual(t, n, RunName(b))
}

func TestRenderErrors(t *testing.T) {
	base := func() *v1alpha1.AgentBuild { return readBuild(t, "testdata/dev.input.yaml") }
	needsFoo := &corev1.ConfigMap{Data: map[string]string{templates.TaskSpecKey: `
params:
  - name: FOO
  - name: IMAGE
results:
  - name: IMAGE_URL
  - name: IMAGE_DIGEST
steps:
  - name: s
    image: busybox:1.37
    script: "true"
`}}
	needsFoo.Name, needsFoo.Namespace = "step-needs-foo", "agents"
	noImage := needsFoo.DeepCopy()
	noImage.Name, noImage.Data = "step-no-image", map[string]string{templates.TaskSpecKey: "steps: [{name: s, image: busybox:1.37}]"}
	badTemplate := &corev1.ConfigMap{Data: map[string]string{templates.TemplateKey: "steps: [{name: Bad_Name, configMap: x}]"}}
	badTemplate.Name, badTemplate.Namespace = "pipeline-template-preprod", "agents"
	l := loader(t, needsFoo, noImage, badTemplate)

	tests := []struct {
		name   string
		mutate func(b *v1alpha1.AgentBuild)
		reason string
		msg    string
	}{{
		name: "step parameter without value",
		mutate: func(b *v1alpha1.AgentBuild) {
			b.Spec.Pipeline = &v1alpha1.PipelineSpec{Steps: []v1alpha1.PipelineStep{{Name: "build", ConfigMap: "step-needs-foo"}}}
		},
		reason: v1alpha1.ReasonMissingParameter, msg: `step "build" requires parameter(s) FOO`,
	}, {
		name: "template's required parameter without value",
		mutate: func(b *v1alpha1.AgentBuild) {
			b.Spec.Mode = v1alpha1.ModeProd
			b.Spec.Pipeline = &v1alpha1.PipelineSpec{Parameters: []v1alpha1.Parameter{{Name: "COSIGN_KEY_SECRET", Value: ""}}}
			b.Spec.BuildOutput.Registry = "quay.io"
		},
		reason: v1alpha1.ReasonMissingParameter, msg: "the template requires parameter(s) COSIGN_KEY_SECRET with no value",
	}, {
		name: "step ConfigMap not found",
		mutate: func(b *v1alpha1.AgentBuild) {
			b.Spec.Pipeline = &v1alpha1.PipelineSpec{Steps: []v1alpha1.PipelineStep{{Name: "build", ConfigMap: "nope"}}}
		},
		reason: v1alpha1.ReasonStepNotFound, msg: "ConfigMap nope (step build) labelled kagenti.io/build-template=true not found in namespace agents or kagenti-system",
	}, {
		name: "new step without configMap",
		mutate: func(b *v1alpha1.AgentBuild) {
			b.Spec.Pipeline = &v1alpha1.PipelineSpec{Steps: []v1alpha1.PipelineStep{{Name: "extra"}}}
		},
		reason: v1alpha1.ReasonInvalidStep, msg: `the template has no step "extra", so configMap is required`,
	}, {
		name: "no step produces the image results",
		mutate: func(b *v1alpha1.AgentBuild) {
			b.Spec.Pipeline = &v1alpha1.PipelineSpec{Steps: []v1alpha1.PipelineStep{{Name: "build", ConfigMap: "step-no-image"}}}
		},
		reason: v1alpha1.ReasonInvalidTemplate, msg: "declares the results IMAGE_URL and IMAGE_DIGEST",
	}, {
		name:   "invalid template in the build's namespace wins over the default",
		mutate: func(b *v1alpha1.AgentBuild) { b.Spec.Mode = v1alpha1.ModePreprod },
		reason: v1alpha1.ReasonInvalidTemplate, msg: "ConfigMap agents/pipeline-template-preprod",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := base()
			tt.mutate(b)
			_, err := render(t, l, b)
			if tt.reason == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tt.reason, Reason(err))
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

func TestTemplateNotFound(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	l := &templates.Loader{Reader: fake.NewClientBuilder().WithScheme(scheme).Build(), Namespace: templateNS}
	_, err := render(t, l, readBuild(t, "testdata/dev.input.yaml"))
	assert.Equal(t, v1alpha1.ReasonTemplateNotFound, Reason(err))
	assert.EqualError(t, err, "ConfigMap pipeline-template-dev (template of mode dev) labelled kagenti.io/build-template=true not found in namespace agents or kagenti-system")
}

func TestBuildParametersOrder(t *testing.T) {
	b := readBuild(t, "testdata/dev.input.yaml")
	b.Spec.Pipeline = &v1alpha1.PipelineSpec{Parameters: []v1alpha1.Parameter{{Name: "IMAGE", Value: "explicit/image:1"}}}
	got := BuildParameters(b, []params.Param{{Name: "REGISTRY", Value: "reg:5000"}})
	assert.Equal(t, []params.Param{
		{Name: "IMAGE", Value: "explicit/image:1"},
		{Name: "SOURCE_REPO_URL", Value: "https://github.com/kagenti/agent-examples"},
		{Name: "SOURCE_REVISION", Value: "main"},
		{Name: "IMAGE", Value: "reg:5000/kagenti/weather-agent:latest"},
	}, got)
}

func BenchmarkRenderProd(b *testing.B) {
	l := loader(b)
	build := readBuild(b, "testdata/prod.input.yaml")
	loaded, err := l.Load(context.Background(), build)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Render(build, loaded); err != nil {
			b.Fatal(err)
		}
	}
}
