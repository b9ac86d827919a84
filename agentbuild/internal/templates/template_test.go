package templates

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/params"
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
