package controller_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
)

// sampleObject returns the object of kind from a multi-document file of deploy/samples.
func sampleObject(t *testing.T, file, kind string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "samples", file))
	require.NoError(t, err)
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var meta struct{ Kind string }
		require.NoError(t, yaml.Unmarshal(doc, &meta))
		if meta.Kind == kind {
			require.NoError(t, yaml.UnmarshalStrict(doc, into), "%s: %s", file, kind)
			return
		}
	}
	t.Fatalf("deploy/samples/%s has no %s", file, kind)
}

// TestSampleAgentHasOneCard: `make run` applies deploy/samples/weather-agent.yaml, then
// agentcard.yaml. The sample's card targets the Deployment, so it takes the place of the card
// agentcard creates for a kagenti.io/type=agent workload: one agent, one card (and so one
// NetworkPolicy from netpol).
func TestSampleAgentHasOneCard(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	var dep appsv1.Deployment
	sampleObject(t, "weather-agent.yaml", "Deployment", &dep)
	var card v1alpha1.AgentCard
	sampleObject(t, "agentcard.yaml", "AgentCard", &card)
	require.NotNil(t, card.Spec.TargetRef, "the sample card targets the workload (a selector card would stand beside the auto-created one)")
	require.Equal(t, dep.Name, card.Spec.TargetRef.Name)

	dep.Namespace, dep.ResourceVersion = ns, ""
	require.NoError(t, k8s.Create(ctx, &dep))
	auto := "weather-agent-deployment-card"
	eventually(t, 10*time.Second, func() string {
		if ok, _ := cardExists(ns, auto); !ok {
			return "the Deployment's card was not auto-created before the sample card was applied"
		}
		return ""
	})
	card.Namespace = ns
	require.NoError(t, k8s.Create(ctx, &card))
	eventually(t, 10*time.Second, func() string {
		var list v1alpha1.AgentCardList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err.Error()
		}
		if len(list.Items) != 1 || list.Items[0].Name != card.Name {
			names := []string{}
			for _, c := range list.Items {
				names = append(names, c.Name)
			}
			return "cards in the sample namespace: " + strings.Join(names, ", ")
		}
		return ""
	})
}
