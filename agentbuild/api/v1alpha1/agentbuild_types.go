package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/pkg/duck"
)

// BuildMode selects the pipeline template (ConfigMap pipeline-template-<mode>) a build starts from.
// +kubebuilder:validation:Enum=dev;buildpack-dev;dev-external;preprod;prod;custom
type BuildMode string

const (
	// ModeDev builds a Dockerfile with a rootless builder and pushes to the in-cluster registry.
	ModeDev BuildMode = "dev"
	// ModeBuildpackDev builds with Cloud Native Buildpacks (no Dockerfile needed).
	ModeBuildpackDev BuildMode = "buildpack-dev"
	// ModeDevExternal is dev pushing to an external registry (spec.buildOutput.registry required).
	ModeDevExternal BuildMode = "dev-external"
	// ModePreprod adds an image vulnerability scan.
	ModePreprod BuildMode = "preprod"
	// ModeProd adds scan, SBOM and signature.
	ModeProd BuildMode = "prod"
	// ModeCustom runs only the steps listed in spec.pipeline.steps.
	ModeCustom BuildMode = "custom"
)

// Modes lists every build mode, in documentation order.
var Modes = []BuildMode{ModeDev, ModeBuildpackDev, ModeDevExternal, ModePreprod, ModeProd, ModeCustom}

// Parameter is a named string value passed to the pipeline's tasks.
type Parameter struct {
	// Name of the parameter, as the step's TaskSpec declares it (e.g. SOURCE_REPO_URL).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_.-]*$`
	Name string `json:"name"`
	// Value of the parameter.
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value"`
}

// Source is the git repository the image is built from.
type Source struct {
	// Repository is the git URL, e.g. https://github.com/kagenti/agent-examples.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(https?://|ssh://|git@)[^\\\\s]+$')",message="must be an http(s)://, ssh:// or git@ URL"
	Repository string `json:"repository"`
	// Revision is the branch, tag or commit to build (main, v1.2.0, refs/pull/42/head, a commit
	// SHA). It follows git's ref-name rules (git check-ref-format) and may not start with '-'.
	// +kubebuilder:default=main
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('-')",message="must not start with '-': git would read it as an option"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('[[:cntrl:][:space:]~^:?*[]') && !self.contains('\\')`,message="must not contain whitespace, control characters, a backslash or any of ~ ^ : ? * [ (git ref-name rules)"
	// +kubebuilder:validation:XValidation:rule="!self.contains('..') && !self.contains('//') && !self.contains('@{') && self != '@'",message="must not contain '..', '//' or '@{', nor be '@' (git ref-name rules)"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.endsWith('/') && !self.endsWith('.') && !self.split('/').exists(c, c.startsWith('.') || c.endsWith('.lock'))",message="must not start or end with '/' or end with '.', and no '/'-separated part may start with '.' or end with '.lock' (git ref-name rules)"
	// +optional
	Revision string `json:"revision,omitempty"`
	// Subfolder is the build context inside the repository (relative, no "..").
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(p, p == '..')",message="must be a relative path without '..'"
	// +optional
	Subfolder string `json:"subfolder,omitempty"`
	// CredentialsSecret names a Secret (basic-auth or ssh-auth) in the build's namespace used to clone.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CredentialsSecret string `json:"credentialsSecret,omitempty"`
}

// PipelineStep adds a step (custom mode) or overrides a step of the mode's template (same name).
type PipelineStep struct {
	// Name of the step; it is the Tekton task name inside the Pipeline.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// ConfigMap holding the step's Tekton TaskSpec under the key task-spec.yaml. Required for steps
	// the template does not define; for a template step it replaces the template's ConfigMap.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ConfigMap string `json:"configMap,omitempty"`
	// Enabled turns the step off when false.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// Parameters for this step only; they win over the template's step and global parameters.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Parameters []Parameter `json:"parameters,omitempty"`
}

// PipelineSpec customises the mode's pipeline.
type PipelineSpec struct {
	// Steps run in order after the template's steps they do not override.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Steps []PipelineStep `json:"steps,omitempty"`
	// Parameters apply to every step and win over everything else.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	// +optional
	Parameters []Parameter `json:"parameters,omitempty"`
}

// BuildArg is a --build-arg NAME=VALUE passed to the image builder.
type BuildArg struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value"`
}

// BuildOutput is where the image is pushed: <registry>/<image>:<tag>.
type BuildOutput struct {
	// Image is the repository path, e.g. kagenti/weather-agent (lowercase, '/'-separated).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`
	Image string `json:"image"`
	// Tag of the pushed image.
	// +kubebuilder:default=latest
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`
	// +optional
	Tag string `json:"tag,omitempty"`
	// Registry host[:port][/namespace]; the mode's template default is used when empty.
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`
	// +optional
	Registry string `json:"registry,omitempty"`
	// CredentialsSecret names a docker-config Secret in the build's namespace used to push.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CredentialsSecret string `json:"credentialsSecret,omitempty"`
}

// DeployTo points at a workload whose container gets the built image after a successful build.
type DeployTo struct {
	// TargetRef is the workload, in the build's namespace.
	TargetRef duck.TargetRef `json:"targetRef"`
	// Container is the name of the container whose image is set.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Container string `json:"container"`
}

// AgentBuildSpec is the desired build.
// +kubebuilder:validation:XValidation:rule="self.mode != 'custom' || (has(self.pipeline) && has(self.pipeline.steps) && size(self.pipeline.steps) > 0)",message="custom mode needs at least one step in spec.pipeline.steps",fieldPath=".pipeline"
// +kubebuilder:validation:XValidation:rule="self.mode != 'custom' || !has(self.pipeline) || !has(self.pipeline.steps) || self.pipeline.steps.all(s, has(s.configMap) && size(s.configMap) > 0)",message="every step of a custom pipeline needs configMap",fieldPath=".pipeline.steps"
// +kubebuilder:validation:XValidation:rule="self.mode != 'dev-external' || (has(self.buildOutput.registry) && size(self.buildOutput.registry) > 0)",message="dev-external mode pushes to an external registry: set spec.buildOutput.registry",fieldPath=".buildOutput.registry"
type AgentBuildSpec struct {
	// Source to build.
	Source Source `json:"source"`
	// Mode selects the pipeline template.
	// +kubebuilder:default=dev
	// +optional
	Mode BuildMode `json:"mode,omitempty"`
	// Pipeline adds steps (custom mode), overrides template steps and sets parameters.
	// +optional
	Pipeline *PipelineSpec `json:"pipeline,omitempty"`
	// BuildArgs are passed to the image builder.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	BuildArgs []BuildArg `json:"buildArgs,omitempty"`
	// BuildOutput is the image to push.
	BuildOutput BuildOutput `json:"buildOutput"`
	// CleanupAfterBuild deletes the run's workspace volume (the source checkout) once the build finished.
	// +kubebuilder:default=true
	// +optional
	CleanupAfterBuild *bool `json:"cleanupAfterBuild,omitempty"`
	// HistoryLimit is how many PipelineRuns (current one included) are kept.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=50
	// +optional
	HistoryLimit *int32 `json:"historyLimit,omitempty"`
	// DeployTo, when set, puts the built image@digest into a container of a workload after success.
	// +optional
	DeployTo *DeployTo `json:"deployTo,omitempty"`
}

// BuildPhase summarises the build.
// +kubebuilder:validation:Enum=Pending;Building;Succeeded;Failed
type BuildPhase string

const (
	PhasePending   BuildPhase = "Pending"
	PhaseBuilding  BuildPhase = "Building"
	PhaseSucceeded BuildPhase = "Succeeded"
	PhaseFailed    BuildPhase = "Failed"
)

// Condition types: Ready (with Reconciling and Stalled, see duck.Status) summarises the build;
// the others are agentbuild's own.
const (
	ConditionReady            = duck.ConditionReady
	ConditionSucceeded        = "Succeeded"
	ConditionTemplateResolved = "TemplateResolved"
	ConditionDeployed         = "Deployed"
)

// Reasons of the Ready condition, and of Reconciling or Stalled next to it. Each is either
// Reconciling (the build gets there by itself: kstatus InProgress, Argo CD Progressing) or Stalled
// (nothing changes until someone changes the AgentBuild, a template or the cluster: kstatus
// Failed, Argo CD Degraded). The deployTo reasons duck.ReasonTargetNotFound (Reconciling: the
// workload may be created after the build, and its creation re-queues the build),
// duck.ReasonUnsupportedKind and duck.ReasonInvalidTargetRef (Stalled) come from target resolution.
const (
	// ReasonBuildSucceeded: Ready=True; the run succeeded and produced image@digest.
	ReasonBuildSucceeded = "BuildSucceeded"
	// ReasonBuilding (Reconciling): the PipelineRun of this generation exists and has not finished,
	// including while it waits for Tekton to start it.
	ReasonBuilding = "Building"
	// ReasonTektonNotInstalled (Stalled): the tekton.dev/v1 kinds are not served. Installing Tekton
	// is a cluster administrator's action, not something that happens on its own; the controller
	// still checks every --tekton-check-interval and recovers without a change to the build.
	ReasonTektonNotInstalled = "TektonNotInstalled"
	// ReasonTemplateNotResolved (Stalled): the mode's template or a step cannot be loaded or
	// rendered; TemplateResolved carries the precise reason (TemplateNotFound, …).
	ReasonTemplateNotResolved = "TemplateNotResolved"
	// ReasonBuildFailed (Stalled): the PipelineRun failed; a new generation builds again.
	ReasonBuildFailed = "BuildFailed"
	// ReasonMissingImageResult (Stalled): the run succeeded without valid IMAGE_URL and IMAGE_DIGEST results.
	ReasonMissingImageResult = "MissingImageResult"
	// ReasonNameConflict (Stalled): a PipelineRun with this generation's name exists and is not
	// controlled by this AgentBuild.
	ReasonNameConflict = "NameConflict"
	// ReasonBuildNotPermitted (Stalled): the API server refused the controller the build's Pipeline
	// or PipelineRun: ClusterRole kagenti-agentbuild-builder is not bound in the build's namespace.
	// Binding it is the platform engineer's action; the controller tries again every
	// --template-retry-interval.
	ReasonBuildNotPermitted = "BuildNotPermitted"
	// ReasonContainerNotFound (Stalled): the deployTo workload has no container of that name.
	ReasonContainerNotFound = "ContainerNotFound"
	// ReasonDeployFailed (Reconciling): writing the image into the workload failed; retried.
	ReasonDeployFailed = "DeployFailed"
)

// Reasons of the other conditions.
const (
	// ReasonPending (Succeeded=Unknown): the PipelineRun waits for Tekton to start it.
	ReasonPending = "Pending"
	// ReasonResolved (TemplateResolved=True): the template rendered into this generation's Pipeline.
	ReasonResolved = "Resolved"
	// ReasonAwaitingBuild (Deployed=Unknown): the image is deployed after a successful build.
	ReasonAwaitingBuild = "AwaitingBuild"
	// ReasonImageDeployed (Deployed=True): the container runs the built image.
	ReasonImageDeployed = "ImageDeployed"

	// TemplateResolved=False reasons (Ready is TemplateNotResolved, Stalled).
	ReasonTemplateNotFound = "TemplateNotFound"
	ReasonInvalidTemplate  = "InvalidTemplate"
	ReasonStepNotFound     = "StepNotFound"
	ReasonInvalidStep      = "InvalidStep"
	ReasonMissingParameter = "MissingParameter"
)

// DeploymentStatus records the image the controller put into the deployTo target.
type DeploymentStatus struct {
	// Target is Kind[.group]/name of the workload.
	Target string `json:"target"`
	// Container that was updated.
	Container string `json:"container"`
	// Image written into the container.
	Image string `json:"image"`
}

// AgentBuildStatus is the observed state of the build.
type AgentBuildStatus struct {
	// observedGeneration and conditions: Ready (the summary), Reconciling or Stalled (present only
	// while True), Succeeded, TemplateResolved and Deployed (with deployTo).
	duck.Status `json:",inline"`
	// Phase is Pending, Building, Succeeded or Failed.
	// +optional
	Phase BuildPhase `json:"phase,omitempty"`
	// Message is a human summary.
	// +optional
	Message string `json:"message,omitempty"`
	// PipelineRunName is the Tekton PipelineRun of the current generation.
	// +optional
	PipelineRunName string `json:"pipelineRunName,omitempty"`
	// LastBuildTime is when the current PipelineRun started.
	// +optional
	LastBuildTime *metav1.Time `json:"lastBuildTime,omitempty"`
	// CompletionTime is when the current PipelineRun finished.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// BuiltImage is image@sha256:digest from the run's IMAGE_URL and IMAGE_DIGEST results.
	// +optional
	BuiltImage string `json:"builtImage,omitempty"`
	// Deployment records the image written into spec.deployTo's workload.
	// +optional
	Deployment *DeploymentStatus `json:"deployment,omitempty"`
}

// AgentBuild builds an agent image from source with a Tekton pipeline.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=abuild;abuilds,categories=kagenti
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.deployTo.targetRef.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.status.builtImage`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentBuild struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AgentBuildSpec `json:"spec,omitempty"`
	// Status defaults to observedGeneration 0, so that tools read a build the controller has not
	// seen yet as in progress.
	// +kubebuilder:default={observedGeneration:0}
	Status AgentBuildStatus `json:"status,omitempty"`
}

// AgentBuildList is a list of AgentBuilds.
// +kubebuilder:object:root=true
type AgentBuildList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentBuild `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentBuild{}, &AgentBuildList{})
}

// GetStatus returns the status model shared by every Kagenti resource.
func (b *AgentBuild) GetStatus() *duck.Status { return &b.Status.Status }

// GetTargetRef lets the duck referrer index find builds by their deployTo target.
func (b *AgentBuild) GetTargetRef() *duck.TargetRef {
	if b.Spec.DeployTo == nil {
		return nil
	}
	return &b.Spec.DeployTo.TargetRef
}

// CleanupEnabled reports spec.cleanupAfterBuild with its default.
func (s *AgentBuildSpec) CleanupEnabled() bool {
	return s.CleanupAfterBuild == nil || *s.CleanupAfterBuild
}

// HistoryLimitOrDefault reports spec.historyLimit with its default.
func (s *AgentBuildSpec) HistoryLimitOrDefault() int {
	if s.HistoryLimit == nil || *s.HistoryLimit < 1 {
		return 3
	}
	return int(*s.HistoryLimit)
}

// ModeOrDefault reports spec.mode with its default.
func (s *AgentBuildSpec) ModeOrDefault() BuildMode {
	if s.Mode == "" {
		return ModeDev
	}
	return s.Mode
}

// RevisionOrDefault reports spec.source.revision with its default.
func (s *AgentBuildSpec) RevisionOrDefault() string {
	if s.Source.Revision == "" {
		return "main"
	}
	return s.Source.Revision
}

// TagOrDefault reports spec.buildOutput.tag with its default.
func (s *AgentBuildSpec) TagOrDefault() string {
	if s.BuildOutput.Tag == "" {
		return "latest"
	}
	return s.BuildOutput.Tag
}
