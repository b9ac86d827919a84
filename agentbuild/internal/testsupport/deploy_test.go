package testsupport

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestChartTemplatesMatchKustomize keeps the helm chart's copy of the default build templates
// identical to deploy/kustomize/agentbuild/templates, and the kustomization listing every file.
func TestChartTemplatesMatchKustomize(t *testing.T) {
	chart := filepath.Join(RepoRoot(), "deploy", "helm", "kagenti", "charts", "agentbuild", "files", "build-templates")
	files, err := filepath.Glob(filepath.Join(TemplatesDir(), "*.yaml"))
	require.NoError(t, err)
	var k struct {
		Resources []string `json:"resources"`
	}
	data, err := os.ReadFile(filepath.Join(TemplatesDir(), "kustomization.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &k))
	listed := map[string]bool{}
	for _, r := range k.Resources {
		listed[r] = true
	}
	n := 0
	for _, f := range files {
		name := filepath.Base(f)
		if name == "kustomization.yaml" {
			continue
		}
		n++
		assert.True(t, listed[name], "%s is not listed in the templates' kustomization.yaml", name)
		want, err := os.ReadFile(f)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(chart, name))
		if assert.NoError(t, err, "chart copy of %s; run: cp deploy/kustomize/agentbuild/templates/{pipeline-template,step}-*.yaml %s/", name, chart) {
			assert.Equal(t, string(want), string(got), "chart copy of %s differs", name)
		}
	}
	chartFiles, err := filepath.Glob(filepath.Join(chart, "*.yaml"))
	require.NoError(t, err)
	assert.Len(t, chartFiles, n, "the chart has templates the kustomize base does not: %v", chartFiles)
	for _, mode := range []string{"dev", "buildpack-dev", "dev-external", "preprod", "prod", "custom"} {
		assert.True(t, listed["pipeline-template-"+mode+".yaml"], "no default template for mode %s", mode)
	}
	assert.False(t, strings.Contains(strings.Join(k.Resources, ","), ":latest"))
}

// TestStepImagesArePinned fails on an unpinned or :latest step image in the shipped templates; a
// step whose image is a parameter ($(params.GIT_IMAGE)) is checked on that parameter's default.
func TestStepImagesArePinned(t *testing.T) {
	for _, cm := range DefaultTemplates(t, "x") {
		var spec struct {
			Params []struct {
				Name    string `json:"name"`
				Default string `json:"default"`
			} `json:"params"`
			Steps []struct {
				Name  string `json:"name"`
				Image string `json:"image"`
			} `json:"steps"`
		}
		raw, isStep := cm.Data["task-spec.yaml"]
		if !isStep {
			continue
		}
		require.NoError(t, yaml.Unmarshal([]byte(raw), &spec), cm.Name)
		require.NotEmpty(t, spec.Steps, cm.Name)
		for _, step := range spec.Steps {
			img := step.Image
			if name, ok := strings.CutPrefix(img, "$(params."); ok {
				name = strings.TrimSuffix(name, ")")
				img = ""
				for _, p := range spec.Params {
					if p.Name == name {
						img = p.Default
					}
				}
				require.NotEmpty(t, img, "%s: step %s takes its image from parameter %s, which has no default", cm.Name, step.Name, name)
			}
			ref := img
			if i := strings.Index(ref, "@"); i >= 0 {
				ref = ref[:i]
			}
			colon := strings.LastIndex(ref, ":")
			assert.True(t, colon > strings.LastIndex(ref, "/"), "%s: image %s has no tag", cm.Name, img)
			assert.NotEqual(t, "latest", ref[colon+1:], "%s: image %s uses :latest", cm.Name, img)
		}
	}
}
