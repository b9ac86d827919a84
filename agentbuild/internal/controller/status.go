package controller

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/resources"
	"github.com/kagenti/platform/agentbuild/internal/tekton"
)

// status is the desired status being computed for one reconcile. It starts from the stored one,
// so that condition transition times survive (meta.SetStatusCondition moves them only on a change)
// and the StatusApplier writes nothing when the verdict is the same.
type status struct {
	*v1alpha1.AgentBuildStatus
	generation int64
}

// newStatus points at desired's status, which describes desired's generation from now on.
func newStatus(desired *v1alpha1.AgentBuild) status {
	s := status{AgentBuildStatus: &desired.Status, generation: desired.Generation}
	s.Observe(desired.Generation)
	if desired.Spec.DeployTo == nil {
		s.Remove(v1alpha1.ConditionDeployed)
		s.Deployment = nil
	}
	return s
}

// hasVerdict reports whether Ready describes this generation: only then is the status written
// after an error, so a failed reconcile never presents an older generation's verdict as current.
func (s status) hasVerdict() bool {
	c := s.Condition(v1alpha1.ConditionReady)
	return c != nil && c.ObservedGeneration == s.generation
}

func (s status) set(condType string, st metav1.ConditionStatus, reason, format string, args ...any) {
	s.Set(condType, st, reason, fmt.Sprintf(format, args...))
}

// newGeneration forgets the previous generation's run before a new one is resolved.
func (s status) newGeneration() {
	s.PipelineRunName, s.BuiltImage, s.LastBuildTime, s.CompletionTime = "", "", nil, nil
}

func (s status) tektonNotInstalled(retry string) {
	s.Phase = v1alpha1.PhasePending
	s.Message = "Tekton Pipelines is not installed: the tekton.dev/v1 Pipeline and PipelineRun kinds are not served; checking again every " + retry
	s.set(v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, v1alpha1.ReasonTektonNotInstalled, "the build waits for Tekton Pipelines")
	s.MarkStalled(v1alpha1.ReasonTektonNotInstalled, s.Message)
}

func (s status) templateFailed(reason, msg string) {
	s.newGeneration()
	s.Phase, s.Message = v1alpha1.PhasePending, msg
	s.set(v1alpha1.ConditionTemplateResolved, metav1.ConditionFalse, reason, "%s", msg)
	s.set(v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, v1alpha1.ReasonTemplateNotResolved, "the build cannot start until its template resolves")
	s.MarkStalled(v1alpha1.ReasonTemplateNotResolved, msg)
}

// notPermitted: the controller may not create the build's Tekton objects in its namespace.
func (s status) notPermitted(namespace string, err error) {
	s.newGeneration()
	s.Phase = v1alpha1.PhasePending
	s.Message = fmt.Sprintf("the agentbuild controller may not build in namespace %s (%v): bind ClusterRole %s there "+
		"(kubectl create rolebinding %s -n %s --clusterrole=%s --serviceaccount=<controller namespace>:kagenti-agentbuild, "+
		"or helm agentbuild.buildNamespaces)", namespace, err, BuilderClusterRole, BuilderClusterRole, namespace, BuilderClusterRole)
	s.set(v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, v1alpha1.ReasonBuildNotPermitted, "the build cannot start until the controller may build in this namespace")
	s.MarkStalled(v1alpha1.ReasonBuildNotPermitted, s.Message)
}

func (s status) nameConflict(name string) {
	s.Phase = v1alpha1.PhaseFailed
	s.Message = fmt.Sprintf("PipelineRun %s exists and is not owned by this AgentBuild", name)
	s.set(v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonNameConflict, "%s", s.Message)
	s.MarkStalled(v1alpha1.ReasonNameConflict, s.Message)
}

// observeRun maps the PipelineRun's Succeeded condition and results to the build's status.
func (s status) observeRun(run *tekton.PipelineRun) {
	s.PipelineRunName = run.Name
	start := run.CreationTimestamp
	if run.Status.StartTime != nil {
		start = *run.Status.StartTime
	}
	s.LastBuildTime, s.CompletionTime, s.BuiltImage = &start, run.Status.CompletionTime, ""
	s.set(v1alpha1.ConditionTemplateResolved, metav1.ConditionTrue, v1alpha1.ReasonResolved, "rendered into Pipeline %s", run.Spec.PipelineRef.Name)
	c := run.Succeeded()
	switch {
	case c == nil:
		s.Phase, s.Message = v1alpha1.PhasePending, fmt.Sprintf("PipelineRun %s is waiting for Tekton to start it", run.Name)
		s.set(v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, v1alpha1.ReasonPending, "%s", s.Message)
		s.MarkReconciling(v1alpha1.ReasonBuilding, s.Message)
	case c.Status == corev1.ConditionUnknown:
		s.Phase, s.Message = v1alpha1.PhaseBuilding, fmt.Sprintf("PipelineRun %s: %s", run.Name, orReason(c))
		s.set(v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, v1alpha1.ReasonBuilding, "%s", s.Message)
		s.MarkReconciling(v1alpha1.ReasonBuilding, s.Message)
	case c.Status == corev1.ConditionFalse:
		s.Phase, s.Message = v1alpha1.PhaseFailed, fmt.Sprintf("PipelineRun %s failed: %s", run.Name, orReason(c))
		s.set(v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonBuildFailed, "%s", s.Message)
		s.MarkStalled(v1alpha1.ReasonBuildFailed, s.Message)
	default:
		image, err := BuiltImage(runResult(run, resources.ResultImageURL), runResult(run, resources.ResultImageDigest))
		if err != nil {
			s.Phase, s.Message = v1alpha1.PhaseFailed, fmt.Sprintf("PipelineRun %s succeeded but %v", run.Name, err)
			s.set(v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonMissingImageResult, "%s", s.Message)
			s.MarkStalled(v1alpha1.ReasonMissingImageResult, s.Message)
			return
		}
		s.BuiltImage = image
		s.Phase, s.Message = v1alpha1.PhaseSucceeded, fmt.Sprintf("built %s", image)
		s.set(v1alpha1.ConditionSucceeded, metav1.ConditionTrue, v1alpha1.ReasonBuildSucceeded, "PipelineRun %s built %s", run.Name, image)
		s.MarkReady(v1alpha1.ReasonBuildSucceeded, s.Message)
	}
}

func orReason(c *tekton.Condition) string {
	if c.Message != "" {
		return c.Reason + ": " + c.Message
	}
	return c.Reason
}

func runResult(run *tekton.PipelineRun, name string) string {
	for _, r := range run.Status.Results {
		if r.Name == name {
			return strings.TrimSpace(r.Value.StringVal)
		}
	}
	return ""
}

var digestPattern = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// BuiltImage joins the IMAGE_URL and IMAGE_DIGEST results into repository@sha256:…, dropping a
// tag (or digest) the URL carries: a digest reference is immutable, a tag is not.
func BuiltImage(url, digest string) (string, error) {
	if url == "" || digest == "" {
		return "", fmt.Errorf("its results lack %s or %s", resources.ResultImageURL, resources.ResultImageDigest)
	}
	if !digestPattern.MatchString(digest) {
		return "", fmt.Errorf("its %s result %q is not sha256:<64 hex>", resources.ResultImageDigest, digest)
	}
	repo := url
	if i := strings.Index(repo, "@"); i >= 0 {
		repo = repo[:i]
	}
	if slash, colon := strings.LastIndex(repo, "/"), strings.LastIndex(repo, ":"); colon > slash {
		repo = repo[:colon]
	}
	return repo + "@" + digest, nil
}
