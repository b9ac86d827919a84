package templates

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/tekton"
)

// Loaded is a mode template with the TaskSpec of every enabled step, ready for rendering.
type Loaded struct {
	Mode     v1alpha1.BuildMode
	Template Template
	// Source is namespace/name of the template ConfigMap ("" when custom mode has none).
	Source string
	Steps  []LoadedStep
}

// LoadedStep is an enabled step with its TaskSpec.
type LoadedStep struct {
	Step
	TaskSpec *tekton.TaskSpec
	// Source is namespace/name of the step ConfigMap.
	Source string
}

// Loader reads templates with Reader: in the controller the cache of NewCache, which holds only
// ConfigMaps labelled Label, so a lookup costs no API round trip and a ConfigMap without the label
// is not found (the messages say which label to add).
type Loader struct {
	Reader client.Reader
	// Namespace is the fallback namespace holding the default templates.
	Namespace string
}

// Load reads the template of the build's mode, merges the build's steps and reads each enabled
// step's TaskSpec. Problems the user can fix are returned as *Error.
func (l *Loader) Load(ctx context.Context, b *v1alpha1.AgentBuild) (*Loaded, error) {
	mode := b.Spec.ModeOrDefault()
	out := &Loaded{Mode: mode}
	cm, err := l.get(ctx, b.Namespace, TemplateConfigMapName(mode))
	switch {
	case err != nil:
		return nil, err
	case cm == nil && mode != v1alpha1.ModeCustom:
		return nil, errorf(v1alpha1.ReasonTemplateNotFound, "ConfigMap %s (template of mode %s) labelled %s=%s not found in namespace %s or %s",
			TemplateConfigMapName(mode), mode, Label, LabelValue, b.Namespace, l.Namespace)
	case cm != nil:
		t, err := ParseTemplate([]byte(cm.Data[TemplateKey]))
		if err != nil {
			return nil, errorf(v1alpha1.ReasonInvalidTemplate, "ConfigMap %s/%s: %v", cm.Namespace, cm.Name, err)
		}
		out.Template, out.Source = *t, cm.Namespace+"/"+cm.Name
	}
	var buildSteps []v1alpha1.PipelineStep
	if b.Spec.Pipeline != nil {
		buildSteps = b.Spec.Pipeline.Steps
	}
	for _, s := range MergeSteps(out.Template.Steps, buildSteps) {
		if !s.IsEnabled() {
			continue
		}
		if s.ConfigMap == "" {
			return nil, errorf(v1alpha1.ReasonInvalidStep, "spec.pipeline.steps[%s]: the template has no step %q, so configMap is required", s.Name, s.Name)
		}
		scm, err := l.get(ctx, b.Namespace, s.ConfigMap)
		if err != nil {
			return nil, err
		}
		if scm == nil {
			return nil, errorf(v1alpha1.ReasonStepNotFound, "ConfigMap %s (step %s) labelled %s=%s not found in namespace %s or %s",
				s.ConfigMap, s.Name, Label, LabelValue, b.Namespace, l.Namespace)
		}
		ts, err := ParseTaskSpec([]byte(scm.Data[TaskSpecKey]))
		if err != nil {
			return nil, errorf(v1alpha1.ReasonInvalidStep, "ConfigMap %s/%s (step %s): %v", scm.Namespace, scm.Name, s.Name, err)
		}
		out.Steps = append(out.Steps, LoadedStep{Step: s, TaskSpec: ts, Source: scm.Namespace + "/" + scm.Name})
	}
	if len(out.Steps) == 0 {
		return nil, errorf(v1alpha1.ReasonInvalidTemplate, "mode %s has no enabled step", mode)
	}
	return out, nil
}

// get returns the ConfigMap from the build's namespace, else from the template namespace, else nil.
func (l *Loader) get(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	for _, ns := range []string{namespace, l.Namespace} {
		if ns == "" {
			continue
		}
		cm := &corev1.ConfigMap{}
		err := l.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cm)
		if err == nil {
			return cm, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", ns, name, err)
		}
	}
	return nil, nil
}
