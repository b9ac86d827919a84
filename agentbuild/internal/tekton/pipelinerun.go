package tekton

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PipelineRun is a tekton.dev/v1 PipelineRun, with the fields the controller writes and reads.
// Never update one decoded into this type: see the package doc.
//
// +kubebuilder:object:root=true
type PipelineRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PipelineRunSpec   `json:"spec,omitempty"`
	Status            PipelineRunStatus `json:"status,omitempty"`
}

// PipelineRunList is a list of PipelineRuns.
//
// +kubebuilder:object:root=true
type PipelineRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PipelineRun `json:"items"`
}

// PipelineRunSpecStatusCancelled in spec.status asks Tekton to cancel a run.
const PipelineRunSpecStatusCancelled = "Cancelled"

// PipelineRunSpec runs a Pipeline with bound workspaces.
type PipelineRunSpec struct {
	PipelineRef     *PipelineRef            `json:"pipelineRef,omitempty"`
	Status          string                  `json:"status,omitempty"`
	TaskRunTemplate PipelineTaskRunTemplate `json:"taskRunTemplate,omitempty"`
	Workspaces      []WorkspaceBinding      `json:"workspaces,omitempty"`
}

// PipelineRef names the Pipeline to run.
type PipelineRef struct {
	Name string `json:"name,omitempty"`
}

// PipelineTaskRunTemplate is what every TaskRun of the run starts from.
type PipelineTaskRunTemplate struct {
	PodTemplate *PodTemplate `json:"podTemplate,omitempty"`
}

// PodTemplate is the part of the task pods the controller sets.
type PodTemplate struct {
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`
}

// WorkspaceBinding binds a Pipeline workspace to a volume.
type WorkspaceBinding struct {
	Name                string                        `json:"name"`
	VolumeClaimTemplate *corev1.PersistentVolumeClaim `json:"volumeClaimTemplate,omitempty"`
	EmptyDir            *corev1.EmptyDirVolumeSource  `json:"emptyDir,omitempty"`
	Secret              *corev1.SecretVolumeSource    `json:"secret,omitempty"`
}

// PipelineRunStatus is what Tekton reports of a run and the controller reads.
type PipelineRunStatus struct {
	Conditions     []Condition         `json:"conditions,omitempty"`
	StartTime      *metav1.Time        `json:"startTime,omitempty"`
	CompletionTime *metav1.Time        `json:"completionTime,omitempty"`
	Results        []PipelineRunResult `json:"results,omitempty"`
}

// ConditionSucceeded is the condition type of a run's outcome.
const ConditionSucceeded = "Succeeded"

// Condition is a Knative-style condition, as Tekton writes them.
type Condition struct {
	Type    string                 `json:"type"`
	Status  corev1.ConditionStatus `json:"status"`
	Reason  string                 `json:"reason,omitempty"`
	Message string                 `json:"message,omitempty"`
}

// PipelineRunResult is a result of a finished run.
type PipelineRunResult struct {
	Name  string     `json:"name"`
	Value ParamValue `json:"value"`
}

// Succeeded returns the run's Succeeded condition, or nil before Tekton started the run.
func (pr *PipelineRun) Succeeded() *Condition {
	for i := range pr.Status.Conditions {
		if pr.Status.Conditions[i].Type == ConditionSucceeded {
			return &pr.Status.Conditions[i]
		}
	}
	return nil
}

// IsDone reports whether the run finished, successfully or not.
func (pr *PipelineRun) IsDone() bool {
	c := pr.Succeeded()
	return c != nil && c.Status != corev1.ConditionUnknown
}

// IsCancelled reports whether cancellation was asked for.
func (pr *PipelineRun) IsCancelled() bool { return pr.Spec.Status == PipelineRunSpecStatusCancelled }
