package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/tekton"
)

// A cached run keeps what the reconciler reads (owner, labels, pipelineRef, spec.status, the
// workspace-cleaned mark, the status with its results) and loses the rest.
func TestTrimForCacheRun(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: "kagenti.io/v1alpha1", Kind: "AgentBuild", Name: "b", UID: "u", Controller: new(true)}
	status := tekton.PipelineRunStatus{
		Conditions: []tekton.Condition{{Type: tekton.ConditionSucceeded, Status: corev1.ConditionTrue, Reason: "Succeeded"}},
		Results:    []tekton.PipelineRunResult{{Name: "IMAGE_DIGEST", Value: tekton.ParamValue{Type: tekton.ParamTypeString, StringVal: "sha256:…"}}},
	}
	run := &tekton.PipelineRun{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "b-1", UID: "r", ResourceVersion: "5",
			Labels:          map[string]string{"kagenti.io/agentbuild-generation": "1"},
			Annotations:     map[string]string{"kagenti.io/agentbuild": "b", "kagenti.io/agentbuild-template": "kagenti-system/pipeline-template-dev", annotationWorkspaceCleaned: "true"},
			OwnerReferences: []metav1.OwnerReference{owner},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "tekton"}},
		},
		Spec: tekton.PipelineRunSpec{
			PipelineRef:     &tekton.PipelineRef{Name: "b-1"},
			Status:          tekton.PipelineRunSpecStatusCancelled,
			TaskRunTemplate: tekton.PipelineTaskRunTemplate{PodTemplate: &tekton.PodTemplate{SecurityContext: &corev1.PodSecurityContext{FSGroup: new(int64(65532))}}},
			Workspaces:      []tekton.WorkspaceBinding{{Name: "source", VolumeClaimTemplate: &corev1.PersistentVolumeClaim{}}},
		},
		Status: status,
	}
	got, err := TrimForCache(run)
	require.NoError(t, err)
	assert.Equal(t, &tekton.PipelineRun{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "b-1", UID: "r", ResourceVersion: "5",
			Labels:          map[string]string{"kagenti.io/agentbuild-generation": "1"},
			Annotations:     map[string]string{annotationWorkspaceCleaned: "true"},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec:   tekton.PipelineRunSpec{PipelineRef: &tekton.PipelineRef{Name: "b-1"}, Status: tekton.PipelineRunSpecStatusCancelled},
		Status: status,
	}, got)
}

// Any cached object loses kubectl's copy of its applied configuration and its managedFields, and
// keeps its other annotations.
func TestTrimForCacheAppliedBuild(t *testing.T) {
	b := &v1alpha1.AgentBuild{ObjectMeta: metav1.ObjectMeta{
		Name:          "b",
		Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: `{"spec":{…}}`, "team": "a"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
	got, err := TrimForCache(b)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"team": "a"}, got.(*v1alpha1.AgentBuild).Annotations)
	assert.Nil(t, got.(*v1alpha1.AgentBuild).ManagedFields)
}

// Only run changes the build's status depends on wake the build; the workspace-cleaned mark the
// controller writes itself does not.
func TestRunChanged(t *testing.T) {
	old := &tekton.PipelineRun{ObjectMeta: metav1.ObjectMeta{Name: "b-1", Generation: 1}}
	update := func(mutate func(*tekton.PipelineRun)) bool {
		n := old.DeepCopy()
		mutate(n)
		return runChanged.Update(event.TypedUpdateEvent[*tekton.PipelineRun]{ObjectOld: old, ObjectNew: n})
	}
	assert.False(t, update(func(r *tekton.PipelineRun) { r.Annotations = map[string]string{annotationWorkspaceCleaned: "true"} }))
	assert.False(t, update(func(r *tekton.PipelineRun) { r.ResourceVersion = "9" }))
	assert.True(t, update(func(r *tekton.PipelineRun) {
		r.Status.Conditions = []tekton.Condition{{Type: tekton.ConditionSucceeded, Status: corev1.ConditionTrue}}
	}))
	assert.True(t, update(func(r *tekton.PipelineRun) { r.Generation = 2; r.Spec.Status = tekton.PipelineRunSpecStatusCancelled }))
	assert.True(t, update(func(r *tekton.PipelineRun) { r.DeletionTimestamp = &metav1.Time{} }))
	assert.True(t, runChanged.Create(event.TypedCreateEvent[*tekton.PipelineRun]{Object: old}))
	assert.True(t, runChanged.Delete(event.TypedDeleteEvent[*tekton.PipelineRun]{Object: old}))
}
