// Command kagenti-agentcard-federation-member is the AgentCard federation's member agent alone: it
// streams to the federation hub the AgentCards labelled for export that this cluster's agentcard
// controller verified. It runs as a Deployment of its own beside the controller, which then runs
// without a federation role (docs/federation.md). It is the member agent of
// kagenti-agentcard --federation=member without the controller, the discovery API and the hub, and
// so a smaller binary and process.
package main

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/federation/member"
	"github.com/kagenti/platform/pkg/duck/kit/command"
)

func main() { command.Main(options()) }

func options() command.Options {
	var o member.Options
	return command.Options{
		Name:  "kagenti-agentcard-federation-member",
		Short: "Streams this cluster's exported, verified AgentCards to the AgentCard federation hub",
		Flags: o.BindFlags,
		// The flags are checked before anything connects.
		Prepare: o.Validate,
		// The heap is mostly the AgentCard cache and the log of what was sent: at 50 it grows to
		// one and a half times them between collections instead of twice (docs/benchmarks.md).
		GCPercent: 50,
		Scheme:    command.SchemeWith(v1alpha1.AddToScheme),
		// Only the AgentCards labelled for export, trimmed to what the agent sends: a card that
		// loses the label leaves the cache, and the agent withdraws it as a deleted one.
		Cache: func(ns []string) cache.Options {
			return cache.Options{DefaultNamespaces: command.NamespaceConfigs(ns), DefaultTransform: cache.TransformStripManagedFields(),
				ByObject: map[client.Object]cache.ByObject{&v1alpha1.AgentCard{}: {
					Label: labels.SelectorFromSet(labels.Set{v1alpha1.LabelExport: "true"}), Transform: member.Trim}}}
		},
		Setup: func(mgr manager.Manager, _ command.Runtime) error { return member.Setup(context.Background(), mgr, o) },
	}
}
