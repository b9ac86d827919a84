package resources

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/params"
	"github.com/kagenti/platform/agentbuild/internal/tekton"
	"github.com/kagenti/platform/agentbuild/internal/templates"
)

// Names of the image results a build pipeline must produce.
const (
	ResultImageURL    = "IMAGE_URL"
	ResultImageDigest = "IMAGE_DIGEST"
)

// Well-known workspaces and what the PipelineRun binds to them.
const (
	WorkspaceSource         = "source"          // a fresh volume per run (volumeClaimTemplate)
	WorkspaceGitCredentials = "git-credentials" // Secret spec.source.credentialsSecret
	WorkspaceDockerConfig   = "dockerconfig"    // Secret spec.buildOutput.credentialsSecret
	WorkspaceCosignKey      = "cosign-key"      // Secret named by the COSIGN_KEY_SECRET parameter
	ParamCosignKeySecret    = "COSIGN_KEY_SECRET"
	defaultWorkspaceSize    = "1Gi"
)

// Rendered is the Pipeline and PipelineRun of one build generation.
type Rendered struct {
	Pipeline    *tekton.Pipeline
	PipelineRun *tekton.PipelineRun
}

// Render resolves every step's parameters and returns the build's Pipeline and PipelineRun.
// A parameter without a value is a *params.MissingError.
func Render(b *v1alpha1.AgentBuild, l *templates.Loaded) (*Rendered, error) {
	p, buildParams, err := MakePipeline(b, l)
	if err != nil {
		return nil, err
	}
	pr, err := MakePipelineRun(b, p, buildParams, l.Template)
	if err != nil {
		return nil, err
	}
	return &Rendered{Pipeline: p, PipelineRun: pr}, nil
}

// MakePipeline returns the Pipeline of the build's current generation: one task per enabled step,
// in order (each runs after the previous), its TaskSpec embedded and its parameters resolved.
// It also returns the AgentBuild's parameter layer, which the PipelineRun needs.
func MakePipeline(b *v1alpha1.AgentBuild, l *templates.Loaded) (*tekton.Pipeline, []params.Param, error) {
	buildParams := BuildParameters(b, l.Template.Parameters)
	stepParams := make([]params.Param, 0)
	for _, s := range l.Steps {
		stepParams = append(stepParams, s.Parameters...)
	}
	if err := params.CheckRequired(l.Template.RequiredParameters, buildParams, stepParams, l.Template.Parameters); err != nil {
		return nil, nil, err
	}
	spec := tekton.PipelineSpec{Description: l.Template.Description}
	workspaces := map[string]bool{} // name → optional in every task declaring it
	var order []string
	var imageTask string
	for i, s := range l.Steps {
		task, err := makeTask(s, buildParams, l.Template.Parameters)
		if err != nil {
			return nil, nil, err
		}
		if i > 0 {
			task.RunAfter = []string{l.Steps[i-1].Name}
		}
		for _, w := range s.TaskSpec.Workspaces {
			opt, seen := workspaces[w.Name]
			if !seen {
				order = append(order, w.Name)
			}
			workspaces[w.Name] = (opt || !seen) && w.Optional
		}
		if declaresResults(s.TaskSpec, ResultImageURL, ResultImageDigest) {
			imageTask = s.Name
		}
		spec.Tasks = append(spec.Tasks, task)
	}
	if imageTask == "" {
		return nil, nil, &templates.Error{Reason: v1alpha1.ReasonInvalidTemplate, Message: fmt.Sprintf(
			"no enabled step of mode %s declares the results %s and %s", l.Mode, ResultImageURL, ResultImageDigest)}
	}
	for _, name := range order {
		spec.Workspaces = append(spec.Workspaces, tekton.PipelineWorkspaceDeclaration{Name: name, Optional: workspaces[name]})
	}
	for _, r := range []string{ResultImageURL, ResultImageDigest} {
		spec.Results = append(spec.Results, tekton.PipelineResult{
			Name:  r,
			Type:  tekton.ParamTypeString,
			Value: tekton.NewString(fmt.Sprintf("$(tasks.%s.results.%s)", imageTask, r)),
		})
	}
	p := &tekton.Pipeline{
		TypeMeta:   metav1.TypeMeta{APIVersion: tekton.GroupVersion.String(), Kind: "Pipeline"},
		ObjectMeta: objectMeta(b),
		Spec:       spec,
	}
	if l.Source != "" {
		p.Annotations[AnnotationTemplate] = l.Source
	}
	return p, buildParams, nil
}

func makeTask(s templates.LoadedStep, buildParams, globals []params.Param) (tekton.PipelineTask, error) {
	declared := make([]params.Declared, 0, len(s.TaskSpec.Params))
	for _, ps := range s.TaskSpec.Params {
		if ps.Type != "" && ps.Type != tekton.ParamTypeString {
			if ps.Default == nil {
				return tekton.PipelineTask{}, &templates.Error{Reason: v1alpha1.ReasonInvalidStep, Message: fmt.Sprintf(
					"step %s: parameter %s has type %s without a default; only string parameters can be set", s.Name, ps.Name, ps.Type)}
			}
			continue // Tekton uses the default
		}
		d := params.Declared{Name: ps.Name}
		if ps.Default != nil {
			d.Default = ptr.To(ps.Default.StringVal)
		}
		declared = append(declared, d)
	}
	values, err := params.Resolve(s.Name, declared, params.Layers{Build: buildParams, Step: s.Parameters, Template: globals})
	if err != nil {
		return tekton.PipelineTask{}, err
	}
	task := tekton.PipelineTask{
		Name:     s.Name,
		TaskSpec: &tekton.EmbeddedTask{TaskSpec: *s.TaskSpec.DeepCopy()},
	}
	for _, v := range values {
		task.Params = append(task.Params, tekton.Param{Name: v.Name, Value: tekton.NewString(v.Value)})
	}
	for _, w := range s.TaskSpec.Workspaces {
		task.Workspaces = append(task.Workspaces, tekton.WorkspacePipelineTaskBinding{Name: w.Name, Workspace: w.Name})
	}
	return task, nil
}

func declaresResults(ts *tekton.TaskSpec, names ...string) bool {
	for _, n := range names {
		found := false
		for _, r := range ts.Results {
			if r.Name == n {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// MakePipelineRun returns the run of p: the source workspace is a new volume per run
// (volumeClaimTemplate), credentials workspaces are bound to the Secrets the spec names, and the
// pods run as non-root with the RuntimeDefault seccomp profile and an fsGroup that lets the
// unprivileged steps write the volume.
func MakePipelineRun(b *v1alpha1.AgentBuild, p *tekton.Pipeline, buildParams []params.Param, t templates.Template) (*tekton.PipelineRun, error) {
	size := t.WorkspaceSize
	if size == "" {
		size = defaultWorkspaceSize
	}
	quantity, err := resource.ParseQuantity(size)
	if err != nil {
		return nil, &templates.Error{Reason: v1alpha1.ReasonInvalidTemplate, Message: fmt.Sprintf("workspaceSize %q: %v", size, err)}
	}
	secrets := map[string]string{
		WorkspaceGitCredentials: b.Spec.Source.CredentialsSecret,
		WorkspaceDockerConfig:   b.Spec.BuildOutput.CredentialsSecret,
		WorkspaceCosignKey:      first(ParamCosignKeySecret, buildParams, t.Parameters),
	}
	var bindings []tekton.WorkspaceBinding
	for _, w := range p.Spec.Workspaces {
		switch secret, isSecret := secrets[w.Name]; {
		case w.Name == WorkspaceSource:
			bindings = append(bindings, tekton.WorkspaceBinding{Name: w.Name, VolumeClaimTemplate: &corev1.PersistentVolumeClaim{
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: quantity}},
				},
			}})
		case isSecret && secret != "":
			bindings = append(bindings, tekton.WorkspaceBinding{Name: w.Name, Secret: &corev1.SecretVolumeSource{SecretName: secret}})
		case isSecret && w.Optional:
			// not bound: the step sees $(workspaces.<name>.bound) == false
		case isSecret:
			return nil, &templates.Error{Reason: v1alpha1.ReasonMissingParameter, Message: fmt.Sprintf(
				"workspace %s needs a Secret: set %s", w.Name, secretField(w.Name))}
		case !w.Optional:
			bindings = append(bindings, tekton.WorkspaceBinding{Name: w.Name, EmptyDir: &corev1.EmptyDirVolumeSource{}})
		}
	}
	return &tekton.PipelineRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: tekton.GroupVersion.String(), Kind: "PipelineRun"},
		ObjectMeta: objectMeta(b),
		Spec: tekton.PipelineRunSpec{
			PipelineRef: &tekton.PipelineRef{Name: p.Name},
			Workspaces:  bindings,
			TaskRunTemplate: tekton.PipelineTaskRunTemplate{PodTemplate: &tekton.PodTemplate{
				SecurityContext: &corev1.PodSecurityContext{
					RunAsNonRoot:   ptr.To(true),
					FSGroup:        ptr.To[int64](65532),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}, nil
}

func secretField(workspace string) string {
	switch workspace {
	case WorkspaceGitCredentials:
		return "spec.source.credentialsSecret"
	case WorkspaceDockerConfig:
		return "spec.buildOutput.credentialsSecret"
	}
	return "the " + ParamCosignKeySecret + " parameter"
}

func objectMeta(b *v1alpha1.AgentBuild) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        RunName(b),
		Namespace:   b.Namespace,
		Labels:      Labels(b),
		Annotations: map[string]string{AnnotationBuild: b.Name},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion:         v1alpha1.GroupVersion.String(),
			Kind:               "AgentBuild",
			Name:               b.Name,
			UID:                b.UID,
			Controller:         ptr.To(true),
			BlockOwnerDeletion: ptr.To(true),
		}},
	}
}
