package resources

import (
	"strings"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/params"
)

// Names of the parameters derived from the AgentBuild's spec.
const (
	ParamSourceRepoURL = "SOURCE_REPO_URL"
	ParamSourceRev     = "SOURCE_REVISION"
	ParamBuildContext  = "BUILD_CONTEXT"
	ParamRegistry      = "REGISTRY"
	ParamImage         = "IMAGE"
	ParamBuildArgs     = "BUILD_ARGS"
)

// BuildParameters is the AgentBuild's layer: spec.pipeline.parameters first (the user's explicit
// values win), then the values derived from the spec. IMAGE is <registry>/<image>:<tag>, with the
// registry from spec.buildOutput.registry, else the REGISTRY parameter (user's, then template's).
func BuildParameters(b *v1alpha1.AgentBuild, templateGlobals []params.Param) []params.Param {
	var out []params.Param
	if b.Spec.Pipeline != nil {
		for _, p := range b.Spec.Pipeline.Parameters {
			out = append(out, params.Param{Name: p.Name, Value: p.Value})
		}
	}
	out = append(out,
		params.Param{Name: ParamSourceRepoURL, Value: b.Spec.Source.Repository},
		params.Param{Name: ParamSourceRev, Value: b.Spec.RevisionOrDefault()},
	)
	if b.Spec.Source.Subfolder != "" {
		out = append(out, params.Param{Name: ParamBuildContext, Value: b.Spec.Source.Subfolder})
	}
	registry := b.Spec.BuildOutput.Registry
	if registry == "" {
		registry = first(ParamRegistry, out, templateGlobals)
	} else {
		out = append(out, params.Param{Name: ParamRegistry, Value: registry})
	}
	image := b.Spec.BuildOutput.Image + ":" + b.Spec.TagOrDefault()
	if registry != "" {
		image = strings.TrimSuffix(registry, "/") + "/" + image
	}
	out = append(out, params.Param{Name: ParamImage, Value: image})
	if len(b.Spec.BuildArgs) > 0 {
		lines := make([]string, 0, len(b.Spec.BuildArgs))
		for _, a := range b.Spec.BuildArgs {
			lines = append(lines, a.Name+"="+a.Value)
		}
		out = append(out, params.Param{Name: ParamBuildArgs, Value: strings.Join(lines, "\n")})
	}
	return out
}

func first(name string, lists ...[]params.Param) string {
	for _, l := range lists {
		for _, p := range l {
			if p.Name == name {
				return p.Value
			}
		}
	}
	return ""
}
