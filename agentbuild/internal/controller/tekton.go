package controller

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/tekton"
)

// tektonWatch adds the PipelineRun watch to the controller the first time the Tekton kinds are
// served. Why not watch from the start: controller-runtime fails the manager's start when a watched
// kind has no REST mapping, which would crash-loop the binary on a cluster without Tekton. Why not
// poll PipelineRuns: once the watch exists, every run change is an event. Until then a build reports
// TektonNotInstalled and is retried every --tekton-check-interval (one cached discovery lookup).
type tektonWatch struct {
	mapper     meta.RESTMapper
	cache      cache.Cache
	scheme     *runtime.Scheme
	controller controller.Controller

	mu       sync.Mutex
	watching bool
}

// runChanged passes the run changes a build's status depends on: creation, deletion, a spec change
// (cancellation bumps the generation) and a status change. Metadata-only updates — the
// workspace-cleaned mark the controller itself writes after a run finished — would wake every
// finished build once more for nothing (a third of all reconciles in a 10,000-build run).
var runChanged = predicate.TypedFuncs[*tekton.PipelineRun]{
	UpdateFunc: func(e event.TypedUpdateEvent[*tekton.PipelineRun]) bool {
		return e.ObjectOld.Generation != e.ObjectNew.Generation ||
			!e.ObjectOld.DeletionTimestamp.Equal(e.ObjectNew.DeletionTimestamp) ||
			!equality.Semantic.DeepEqual(e.ObjectOld.Status, e.ObjectNew.Status)
	},
}

// Ensure reports whether Tekton's Pipeline and PipelineRun kinds are served, and starts the
// PipelineRun watch the first time they are.
func (t *tektonWatch) Ensure(ctx context.Context) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.watching {
		return true, nil
	}
	for _, kind := range []string{"Pipeline", "PipelineRun"} {
		gk := tekton.GroupVersion.WithKind(kind).GroupKind()
		if _, err := t.mapper.RESTMapping(gk, tekton.GroupVersion.Version); err != nil {
			if meta.IsNoMatchError(err) {
				return false, nil
			}
			return false, fmt.Errorf("discovering %s: %w", gk, err)
		}
	}
	src := source.Kind(t.cache, &tekton.PipelineRun{},
		handler.TypedEnqueueRequestForOwner[*tekton.PipelineRun](t.scheme, t.mapper, &v1alpha1.AgentBuild{}, handler.OnlyControllerOwner()),
		runChanged)
	if err := t.controller.Watch(src); err != nil {
		return false, fmt.Errorf("watching PipelineRuns: %w", err)
	}
	t.watching = true
	return true, nil
}
