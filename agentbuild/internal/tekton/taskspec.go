package tekton

import (
	"bytes"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/selection"
)

// TaskSpec is a Tekton task's spec: the content of a step ConfigMap's task-spec.yaml, embedded in
// the Pipeline's task. Every field of Tekton's v1 TaskSpec is here (see the package doc).
type TaskSpec struct {
	Params       []ParamSpec            `json:"params,omitempty"`
	DisplayName  string                 `json:"displayName,omitempty"`
	Description  string                 `json:"description,omitempty"`
	Steps        []Step                 `json:"steps,omitempty"`
	Volumes      []corev1.Volume        `json:"volumes,omitempty"`
	StepTemplate *StepTemplate          `json:"stepTemplate,omitempty"`
	Sidecars     []Sidecar              `json:"sidecars,omitempty"`
	Workspaces   []WorkspaceDeclaration `json:"workspaces,omitempty"`
	Results      []TaskResult           `json:"results,omitempty"`
}

// ParamType is string, array or object.
type ParamType string

// ParamTypeString is the type of the parameters the controller sets.
const ParamTypeString ParamType = "string"

// ParamSpec declares a task parameter.
type ParamSpec struct {
	Name        string                  `json:"name"`
	Type        ParamType               `json:"type,omitempty"`
	Description string                  `json:"description,omitempty"`
	Properties  map[string]PropertySpec `json:"properties,omitempty"`
	Default     *ParamValue             `json:"default,omitempty"`
	Enum        []string                `json:"enum,omitempty"`
}

// PropertySpec is the type of one key of an object parameter or result.
type PropertySpec struct {
	Type ParamType `json:"type,omitempty"`
}

// ParamValue is a parameter's or result's value: a string, an array of strings or an object of
// strings, written in JSON as that value itself.
type ParamValue struct {
	Type      ParamType
	StringVal string
	ArrayVal  []string
	ObjectVal map[string]string
}

// NewString returns a string value.
func NewString(s string) ParamValue { return ParamValue{Type: ParamTypeString, StringVal: s} }

// UnmarshalJSON reads a string, an array of strings or an object of strings. As Tekton does, any
// other JSON (a number, an array of numbers, …) is kept as a string: its JSON text when it is not a
// JSON string. Tekton's validation, not decoding, rejects a value of the wrong type.
func (v *ParamValue) UnmarshalJSON(data []byte) error {
	*v = ParamValue{Type: ParamTypeString}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil
	}
	switch trimmed[0] {
	case '[':
		var a []string
		if json.Unmarshal(trimmed, &a) == nil {
			*v = ParamValue{Type: "array", ArrayVal: a}
			return nil
		}
	case '{':
		var m map[string]string
		if json.Unmarshal(trimmed, &m) == nil {
			*v = ParamValue{Type: "object", ObjectVal: m}
			return nil
		}
	}
	if json.Unmarshal(trimmed, &v.StringVal) != nil {
		v.StringVal = string(data)
	}
	return nil
}

// MarshalJSON writes the value of its type.
func (v ParamValue) MarshalJSON() ([]byte, error) {
	switch v.Type {
	case ParamTypeString:
		return json.Marshal(v.StringVal)
	case "array":
		return json.Marshal(v.ArrayVal)
	case "object":
		return json.Marshal(v.ObjectVal)
	}
	return nil, fmt.Errorf("parameter value of unknown type %q", v.Type)
}

// Step is a container of a task.
type Step struct {
	Name             string                      `json:"name"`
	DisplayName      string                      `json:"displayName,omitempty"`
	Image            string                      `json:"image,omitempty"`
	Command          []string                    `json:"command,omitempty"`
	Args             []string                    `json:"args,omitempty"`
	WorkingDir       string                      `json:"workingDir,omitempty"`
	EnvFrom          []corev1.EnvFromSource      `json:"envFrom,omitempty"`
	Env              []corev1.EnvVar             `json:"env,omitempty"`
	ComputeResources corev1.ResourceRequirements `json:"computeResources,omitempty"`
	VolumeMounts     []corev1.VolumeMount        `json:"volumeMounts,omitempty"`
	VolumeDevices    []corev1.VolumeDevice       `json:"volumeDevices,omitempty"`
	ImagePullPolicy  corev1.PullPolicy           `json:"imagePullPolicy,omitempty"`
	SecurityContext  *corev1.SecurityContext     `json:"securityContext,omitempty"`
	Script           string                      `json:"script,omitempty"`
	Timeout          *metav1.Duration            `json:"timeout,omitempty"`
	Workspaces       []WorkspaceUsage            `json:"workspaces,omitempty"`
	OnError          string                      `json:"onError,omitempty"`
	StdoutConfig     *StepOutputConfig           `json:"stdoutConfig,omitempty"`
	StderrConfig     *StepOutputConfig           `json:"stderrConfig,omitempty"`
	Ref              *Ref                        `json:"ref,omitempty"`
	Params           []Param                     `json:"params,omitempty"`
	Results          []StepResult                `json:"results,omitempty"`
	When             []WhenExpression            `json:"when,omitempty"`
}

// StepTemplate is what every step of a task starts from.
type StepTemplate struct {
	Image            string                      `json:"image,omitempty"`
	Command          []string                    `json:"command,omitempty"`
	Args             []string                    `json:"args,omitempty"`
	WorkingDir       string                      `json:"workingDir,omitempty"`
	EnvFrom          []corev1.EnvFromSource      `json:"envFrom,omitempty"`
	Env              []corev1.EnvVar             `json:"env,omitempty"`
	ComputeResources corev1.ResourceRequirements `json:"computeResources,omitempty"`
	VolumeMounts     []corev1.VolumeMount        `json:"volumeMounts,omitempty"`
	VolumeDevices    []corev1.VolumeDevice       `json:"volumeDevices,omitempty"`
	ImagePullPolicy  corev1.PullPolicy           `json:"imagePullPolicy,omitempty"`
	SecurityContext  *corev1.SecurityContext     `json:"securityContext,omitempty"`
}

// Sidecar is a container running next to a task's steps.
type Sidecar struct {
	Name                     string                          `json:"name"`
	Image                    string                          `json:"image,omitempty"`
	Command                  []string                        `json:"command,omitempty"`
	Args                     []string                        `json:"args,omitempty"`
	WorkingDir               string                          `json:"workingDir,omitempty"`
	Ports                    []corev1.ContainerPort          `json:"ports,omitempty"`
	EnvFrom                  []corev1.EnvFromSource          `json:"envFrom,omitempty"`
	Env                      []corev1.EnvVar                 `json:"env,omitempty"`
	ComputeResources         corev1.ResourceRequirements     `json:"computeResources,omitempty"`
	VolumeMounts             []corev1.VolumeMount            `json:"volumeMounts,omitempty"`
	VolumeDevices            []corev1.VolumeDevice           `json:"volumeDevices,omitempty"`
	LivenessProbe            *corev1.Probe                   `json:"livenessProbe,omitempty"`
	ReadinessProbe           *corev1.Probe                   `json:"readinessProbe,omitempty"`
	StartupProbe             *corev1.Probe                   `json:"startupProbe,omitempty"`
	Lifecycle                *corev1.Lifecycle               `json:"lifecycle,omitempty"`
	TerminationMessagePath   string                          `json:"terminationMessagePath,omitempty"`
	TerminationMessagePolicy corev1.TerminationMessagePolicy `json:"terminationMessagePolicy,omitempty"`
	ImagePullPolicy          corev1.PullPolicy               `json:"imagePullPolicy,omitempty"`
	SecurityContext          *corev1.SecurityContext         `json:"securityContext,omitempty"`
	Stdin                    bool                            `json:"stdin,omitempty"`
	StdinOnce                bool                            `json:"stdinOnce,omitempty"`
	TTY                      bool                            `json:"tty,omitempty"`
	Script                   string                          `json:"script,omitempty"`
	Workspaces               []WorkspaceUsage                `json:"workspaces,omitempty"`
	RestartPolicy            *corev1.ContainerRestartPolicy  `json:"restartPolicy,omitempty"`
}

// StepOutputConfig redirects a step's stdout or stderr to a file.
type StepOutputConfig struct {
	Path string `json:"path,omitempty"`
}

// Ref refers to a StepAction, by name or through a resolver.
type Ref struct {
	Name        string `json:"name,omitempty"`
	ResolverRef `json:",omitempty"`
}

// ResolverRef names a remote resolver and its parameters.
type ResolverRef struct {
	Resolver string  `json:"resolver,omitempty"`
	Params   []Param `json:"params,omitempty"`
}

// Param is a parameter's value.
type Param struct {
	Name  string     `json:"name"`
	Value ParamValue `json:"value"`
}

// WhenExpression guards a step.
type WhenExpression struct {
	Input    string             `json:"input,omitempty"`
	Operator selection.Operator `json:"operator,omitempty"`
	Values   []string           `json:"values,omitempty"`
	CEL      string             `json:"cel,omitempty"`
}

// WorkspaceDeclaration declares a workspace a task uses.
type WorkspaceDeclaration struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	MountPath   string `json:"mountPath,omitempty"`
	ReadOnly    bool   `json:"readOnly,omitempty"`
	Optional    bool   `json:"optional,omitempty"`
}

// WorkspaceUsage mounts a workspace into one step or sidecar.
type WorkspaceUsage struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
}

// TaskResult declares a result a task produces.
type TaskResult struct {
	Name        string                  `json:"name"`
	Type        ParamType               `json:"type,omitempty"`
	Properties  map[string]PropertySpec `json:"properties,omitempty"`
	Description string                  `json:"description,omitempty"`
	Value       *ParamValue             `json:"value,omitempty"`
}

// StepResult declares a result a step produces.
type StepResult struct {
	Name        string                  `json:"name"`
	Type        ParamType               `json:"type,omitempty"`
	Properties  map[string]PropertySpec `json:"properties,omitempty"`
	Description string                  `json:"description,omitempty"`
}
