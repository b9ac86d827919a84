package controller

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/resources"
	"github.com/kagenti/platform/agentbuild/internal/tekton"
)

// annotationWorkspaceCleaned marks a finished run whose workspace volumes were deleted.
const annotationWorkspaceCleaned = "kagenti.io/workspace-cleaned"

// prune cancels runs of older generations that are still running (they build a superseded spec)
// and deletes all but the newest historyLimit runs, with their Pipelines.
func (r *Reconciler) prune(ctx context.Context, b *v1alpha1.AgentBuild) error {
	list := &tekton.PipelineRunList{}
	if err := r.Client.List(ctx, list, client.InNamespace(b.Namespace), client.MatchingLabels{resources.LabelBuildUID: string(b.UID)}); err != nil {
		return err
	}
	runs := list.Items
	sort.SliceStable(runs, func(i, j int) bool { return generationOf(&runs[i]) > generationOf(&runs[j]) })
	limit := b.Spec.HistoryLimitOrDefault()
	for i := range runs {
		run := &runs[i]
		if !metav1.IsControlledBy(run, b) || run.DeletionTimestamp != nil {
			continue
		}
		if i >= limit {
			if err := r.deleteRun(ctx, run); err != nil {
				return err
			}
			continue
		}
		if generationOf(run) < b.Generation && !run.IsDone() && !run.IsCancelled() {
			patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"status":"`+tekton.PipelineRunSpecStatusCancelled+`"}}`))
			if err := r.Client.Patch(ctx, run, patch); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("cancelling superseded PipelineRun %s: %w", run.Name, err)
			}
			r.event(b, "Normal", "BuildSuperseded", "Cancel", "cancelled PipelineRun "+run.Name+" of an older generation")
		}
	}
	return nil
}

// deleteRun deletes a pruned run's Pipeline first, then the run: should the controller stop between
// the two, the run is still listed and the next prune finishes the job, so a Pipeline is never left
// behind by a run that is gone.
func (r *Reconciler) deleteRun(ctx context.Context, run *tekton.PipelineRun) error {
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	if run.Spec.PipelineRef != nil {
		p := &tekton.Pipeline{ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: run.Spec.PipelineRef.Name}}
		if err := r.Client.Delete(ctx, p, bg); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("pruning Pipeline %s: %w", p.Name, err)
		}
	}
	if err := r.Client.Delete(ctx, run, bg); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("pruning PipelineRun %s: %w", run.Name, err)
	}
	return nil
}

func generationOf(run *tekton.PipelineRun) int64 {
	g, _ := strconv.ParseInt(run.Labels[resources.LabelBuildGeneration], 10, 64)
	return g
}

// cleanupWorkspace deletes the volumes Tekton created for the finished run's volumeClaimTemplate
// workspaces (they are owned by the run) and marks the run, so it is done once.
func (r *Reconciler) cleanupWorkspace(ctx context.Context, run *tekton.PipelineRun) error {
	if run.Annotations[annotationWorkspaceCleaned] == "true" {
		return nil
	}
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := r.API.List(ctx, pvcs, client.InNamespace(run.Namespace)); err != nil {
		return err
	}
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		if !ownedBy(pvc, run) {
			continue
		}
		if err := r.Client.Delete(ctx, pvc); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting workspace volume %s: %w", pvc.Name, err)
		}
	}
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"`+annotationWorkspaceCleaned+`":"true"}}}`))
	return client.IgnoreNotFound(r.Client.Patch(ctx, run, patch))
}

func ownedBy(o metav1.Object, owner metav1.Object) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == owner.GetUID() {
			return true
		}
	}
	return false
}
