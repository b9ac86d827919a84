package kit

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/duck"
)

// StatusReconciler is the shell of a reconciler that reports what it did in its resource's
// status: read the resource, let Body reconcile a copy of it and set that copy's status, then
// write the status through the shared StatusApplier. The pillar's reconciler is Body alone.
//
// A resource being deleted is left alone (what it made goes with it, by owner reference). A Body
// error with no verdict is returned for a retry and the stored status keeps saying what it said; an
// error with a verdict (the status names the failure) is written first, then returned. A status
// write refused as stale (the cache has not yet seen this controller's previous write) is retried
// after duck.StaleRetry without writing, so no condition restarts its lastTransitionTime and no
// Event repeats.
type StatusReconciler[T duck.Object] struct {
	Client client.Reader
	Status *duck.StatusApplier
	// New returns an empty resource of the reconciled kind.
	New func() T
	// Gone, when set, runs when the resource no longer exists (to forget what was kept for it).
	Gone func(types.NamespacedName)
	// Body reconciles desired, a copy of the stored resource, and sets its status. verdict reports
	// that the status says something about this attempt, so it is written even when err is not nil.
	Body func(ctx context.Context, desired T) (result ctrl.Result, verdict bool, err error)
}

// Reconcile implements reconcile.Reconciler.
func (r *StatusReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	current := r.New()
	if err := r.Client.Get(ctx, req.NamespacedName, current); err != nil {
		if apierrors.IsNotFound(err) && r.Gone != nil {
			r.Gone(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !current.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, nil
	}
	desired := current.DeepCopyObject().(T)
	result, verdict, err := r.Body(ctx, desired)
	if err != nil && !verdict {
		return result, err
	}
	switch applyErr := r.Status.Apply(ctx, current, desired); {
	case duck.IsStale(applyErr):
		return ctrl.Result{RequeueAfter: duck.StaleRetry}, err
	case applyErr != nil && !apierrors.IsNotFound(applyErr):
		return ctrl.Result{}, errors.Join(err, applyErr)
	}
	return result, err
}
