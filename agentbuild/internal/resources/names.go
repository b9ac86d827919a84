// Package resources turns an AgentBuild and its loaded template into Tekton objects. Every
// function is pure: no client, no clock.
package resources

import (
	"strconv"

	"github.com/kagenti/platform/pkg/configmap"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

const (
	// ManagedBy is the app.kubernetes.io/managed-by value of every object this controller creates.
	ManagedBy = "kagenti-agentbuild"
	// LabelManagedBy is the standard managed-by label.
	LabelManagedBy = contract.ManagedByLabel
	// LabelBuildUID selects every Pipeline and PipelineRun of one AgentBuild (UIDs fit a label value;
	// build names may not).
	LabelBuildUID = "kagenti.io/agentbuild-uid"
	// LabelBuildGeneration is the AgentBuild generation a run builds.
	LabelBuildGeneration = "kagenti.io/agentbuild-generation"
	// LabelBuildMode is the build mode.
	LabelBuildMode = "kagenti.io/agentbuild-mode"
	// AnnotationBuild names the AgentBuild (names can exceed a label value's 63 characters).
	AnnotationBuild = "kagenti.io/agentbuild"
	// AnnotationTemplate records the template ConfigMap a Pipeline was rendered from.
	AnnotationTemplate = "kagenti.io/agentbuild-template"
)

// RunName is the name of the Pipeline and the PipelineRun of the build's current generation:
// {build}-{generation}, shortened with a hash when longer than 63 characters (PipelineRun names are
// used as label values by Tekton). It is deterministic, so a retried reconcile of the same
// generation finds the run it created instead of starting another.
func RunName(b *v1alpha1.AgentBuild) string {
	return configmap.ChildName(b.Name, strconv.FormatInt(b.Generation, 10))
}

// Labels are the labels of every object made for the build's current generation.
func Labels(b *v1alpha1.AgentBuild) map[string]string {
	return map[string]string{
		LabelManagedBy:       ManagedBy,
		LabelBuildUID:        string(b.UID),
		LabelBuildGeneration: strconv.FormatInt(b.Generation, 10),
		LabelBuildMode:       string(b.Spec.ModeOrDefault()),
	}
}
