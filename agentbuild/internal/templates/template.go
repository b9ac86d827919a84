// Package templates reads build-mode templates and step TaskSpecs from ConfigMaps.
//
// A mode template is the ConfigMap pipeline-template-<mode> with key template.yaml; every step it
// lists is a ConfigMap with key task-spec.yaml holding a Tekton TaskSpec. ConfigMaps are looked up
// in the AgentBuild's namespace first (so a team can override a template or ship its own steps) and
// then in the controller's template namespace (--template-namespace, default kagenti-system).
package templates

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/params"
	"github.com/kagenti/platform/agentbuild/internal/tekton"
)

const (
	// TemplateKey is the key of a mode template ConfigMap.
	TemplateKey = "template.yaml"
	// TaskSpecKey is the key of a step ConfigMap.
	TaskSpecKey = "task-spec.yaml"
	// DefaultNamespace is where the default templates are installed.
	DefaultNamespace = "kagenti-system"
)

// Error is a template problem the user can fix; Reason is the TemplateResolved condition's reason
// (v1alpha1.ReasonTemplateNotFound, …).
type Error struct {
	Reason  string
	Message string
}

func (e *Error) Error() string { return e.Message }

func errorf(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// TemplateConfigMapName is the ConfigMap name of a mode's template.
func TemplateConfigMapName(mode v1alpha1.BuildMode) string {
	return "pipeline-template-" + string(mode)
}

// Template is the content of template.yaml.
type Template struct {
	// Description is for humans.
	Description string `json:"description,omitempty"`
	// Parameters are the template's global parameters.
	Parameters []params.Param `json:"parameters,omitempty"`
	// RequiredParameters must have a non-empty value after resolution.
	RequiredParameters []string `json:"requiredParameters,omitempty"`
	// Steps run in order.
	Steps []Step `json:"steps,omitempty"`
	// WorkspaceSize is the size of the source workspace volume (default 1Gi).
	WorkspaceSize string `json:"workspaceSize,omitempty"`
}

// Step is one step of a template (or of the AgentBuild's spec.pipeline.steps).
type Step struct {
	Name       string         `json:"name"`
	ConfigMap  string         `json:"configMap"`
	Enabled    *bool          `json:"enabled,omitempty"`
	Parameters []params.Param `json:"parameters,omitempty"`
}

// IsEnabled reports Enabled with its default (true).
func (s Step) IsEnabled() bool { return s.Enabled == nil || *s.Enabled }

// ParseTemplate reads template.yaml strictly (unknown fields are errors) and validates it.
func ParseTemplate(data []byte) (*Template, error) {
	var t Template
	if err := yaml.UnmarshalStrict(data, &t); err != nil {
		return nil, fmt.Errorf("%s: %w", TemplateKey, err)
	}
	seen := map[string]bool{}
	for i, s := range t.Steps {
		if msgs := validation.IsDNS1123Label(s.Name); len(msgs) > 0 {
			return nil, fmt.Errorf("%s: steps[%d].name %q: %s", TemplateKey, i, s.Name, msgs[0])
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("%s: steps[%d].name %q is not unique", TemplateKey, i, s.Name)
		}
		seen[s.Name] = true
		if s.ConfigMap == "" {
			return nil, fmt.Errorf("%s: steps[%d] (%s) needs configMap", TemplateKey, i, s.Name)
		}
	}
	return &t, nil
}

// ParseTaskSpec reads task-spec.yaml strictly into a Tekton TaskSpec: a field Tekton does not
// know, at any depth, is an error.
func ParseTaskSpec(data []byte) (*tekton.TaskSpec, error) {
	var ts tekton.TaskSpec
	if err := yaml.UnmarshalStrict(data, &ts); err != nil {
		return nil, fmt.Errorf("%s: %w", TaskSpecKey, err)
	}
	if len(ts.Steps) == 0 {
		return nil, fmt.Errorf("%s: a TaskSpec needs at least one step", TaskSpecKey)
	}
	return &ts, nil
}

// MergeSteps overlays the AgentBuild's steps on the template's: a step with a template step's name
// overrides its configMap (when set), enabled (when set) and puts its parameters first; other steps
// are appended in the order given.
func MergeSteps(template []Step, build []v1alpha1.PipelineStep) []Step {
	out := make([]Step, 0, len(template)+len(build))
	index := map[string]int{}
	for _, s := range template {
		index[s.Name] = len(out)
		s.Parameters = append([]params.Param(nil), s.Parameters...)
		out = append(out, s)
	}
	for _, b := range build {
		ps := make([]params.Param, 0, len(b.Parameters))
		for _, p := range b.Parameters {
			ps = append(ps, params.Param{Name: p.Name, Value: p.Value})
		}
		i, ok := index[b.Name]
		if !ok {
			out = append(out, Step{Name: b.Name, ConfigMap: b.ConfigMap, Enabled: b.Enabled, Parameters: ps})
			continue
		}
		if b.ConfigMap != "" {
			out[i].ConfigMap = b.ConfigMap
		}
		if b.Enabled != nil {
			out[i].Enabled = b.Enabled
		}
		out[i].Parameters = append(ps, out[i].Parameters...)
	}
	return out
}
