// Package controller wires this pillar's reconcilers into a controller-runtime manager.
package controller

import (
	ctrl "sigs.k8s.io/controller-runtime"
)

// Options are the pillar-specific settings taken from the command line.
type Options struct{}

// Setup registers the pillar's reconcilers, indexes and watches with mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	return nil
}
