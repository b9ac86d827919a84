package tekton

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Pipeline is a tekton.dev/v1 Pipeline, with the fields the controller writes.
//
// +kubebuilder:object:root=true
type Pipeline struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PipelineSpec `json:"spec"`
}

// PipelineList is a list of Pipelines.
//
// +kubebuilder:object:root=true
type PipelineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Pipeline `json:"items"`
}

// PipelineSpec is the tasks, workspaces and results of a Pipeline.
type PipelineSpec struct {
	Description string                         `json:"description,omitempty"`
	Tasks       []PipelineTask                 `json:"tasks,omitempty"`
	Workspaces  []PipelineWorkspaceDeclaration `json:"workspaces,omitempty"`
	Results     []PipelineResult               `json:"results,omitempty"`
}

// PipelineTask is one task of a Pipeline, its TaskSpec embedded.
type PipelineTask struct {
	Name       string                         `json:"name,omitempty"`
	TaskSpec   *EmbeddedTask                  `json:"taskSpec,omitempty"`
	RunAfter   []string                       `json:"runAfter,omitempty"`
	Params     []Param                        `json:"params,omitempty"`
	Workspaces []WorkspacePipelineTaskBinding `json:"workspaces,omitempty"`
}

// EmbeddedTask is a TaskSpec inside a PipelineTask. Spec (a custom task's spec) and Metadata are
// Tekton's fields too; they are kept so that the JSON written is the JSON Tekton's client writes.
type EmbeddedTask struct {
	Spec     runtime.RawExtension `json:"spec,omitempty"`
	Metadata PipelineTaskMetadata `json:"metadata,omitempty"`
	TaskSpec `json:",inline"`
}

// PipelineTaskMetadata is labels and annotations for the task's TaskRun and pod.
type PipelineTaskMetadata struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PipelineWorkspaceDeclaration declares a workspace the PipelineRun binds.
type PipelineWorkspaceDeclaration struct {
	Name     string `json:"name"`
	Optional bool   `json:"optional,omitempty"`
}

// WorkspacePipelineTaskBinding passes a Pipeline workspace to a task.
type WorkspacePipelineTaskBinding struct {
	Name      string `json:"name"`
	Workspace string `json:"workspace,omitempty"`
}

// PipelineResult is a result of the Pipeline, taken from a task's result.
type PipelineResult struct {
	Name        string     `json:"name"`
	Type        ParamType  `json:"type,omitempty"`
	Description string     `json:"description"`
	Value       ParamValue `json:"value"`
}
