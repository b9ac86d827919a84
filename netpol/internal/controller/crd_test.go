package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kagenti/platform/netpol/internal/resources"
	"github.com/kagenti/platform/netpol/internal/view"
)

// TestCRDInstalledLater: netpol starts on an API server without the AgentCard CRD, says so in its
// readiness check instead of failing, and starts reconciling once the CRD is installed.
func TestCRDInstalledLater(t *testing.T) {
	env := &envtest.Environment{ControlPlaneStartTimeout: 2 * time.Minute}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)

	mgr := newManager(t, cfg)
	opts := DefaultOptions()
	opts.CRDPollInterval = 100 * time.Millisecond
	w := &crdWaiter{mgr: mgr, opts: opts}
	require.NoError(t, mgr.Add(w))
	startManager(t, mgr)

	// The manager runs, but is not ready, and says why.
	time.Sleep(300 * time.Millisecond) // a few poll intervals: the manager must not have exited
	err = w.Check(nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the AgentCard CRD (agentcards.kagenti.io/v1alpha1) is not installed")

	_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{agentCardCRDDir()}, ErrorIfPathMissing: true})
	require.NoError(t, err)
	eventually(t, "ready once the CRD is installed", func() (bool, string) {
		err := w.Check(nil)
		return err == nil, fmt.Sprint(err)
	})

	ns := "late-crd"
	require.NoError(t, c.Create(context.Background(), nsObj(ns)))
	deployment(t, c, ns, "weather")
	agentCard(t, c, ns, "weather-card", targetSpec("Deployment", "weather"))
	// The shared helpers read through k8s (the shared API server); poll this one directly.
	eventually(t, "policy on the late-CRD API server", func() (bool, string) {
		np := policyFrom(c, ns, "weather-agent-policy")
		if np == nil {
			return false, "no policy"
		}
		return np.Annotations[resources.PolicyKindAnnotation] == resources.Restrictive, "kind " + np.Annotations[resources.PolicyKindAnnotation]
	})
}

// TestCachedCardIsOneManagedField: the AgentCard CRD declares status.card an atomic map, so the
// cached A2A card is one entry in managedFields, whatever its content, and the API server does not
// track (and store, and convert on every write) a field path per key of the card. A second
// document replaces the first as a whole.
func TestCachedCardIsOneManagedField(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	agentCard(t, k8s, ns, "atomic-card", targetSpec("Deployment", "atomic-card"))
	apply := func(card map[string]any) *unstructured.Unstructured {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": view.GroupVersion.String(), "kind": "AgentCard",
			"metadata": map[string]any{"name": "atomic-card", "namespace": ns},
			"status":   map[string]any{"card": card},
		}}
		require.NoError(t, k8s.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
			client.FieldOwner("kagenti-agentcard"), client.ForceOwnership))
		got := view.NewAgentCard()
		require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "atomic-card"}, got))
		return got
	}
	got := apply(map[string]any{"name": "agent", "version": "1.0.0",
		"capabilities": map[string]any{"streaming": true}, "provider": map[string]any{"organization": "kagenti"}})

	var owned []string
	for _, f := range got.GetManagedFields() {
		if f.Manager == "kagenti-agentcard" && f.Subresource == "status" {
			var fields map[string]map[string]any
			require.NoError(t, json.Unmarshal(f.FieldsV1.Raw, &fields))
			card, err := json.Marshal(fields["f:status"]["f:card"])
			require.NoError(t, err)
			owned = append(owned, string(card))
		}
	}
	assert.Equal(t, []string{"{}"}, owned, "agentcard's status entry owns status.card as one field, none of its keys")

	got = apply(map[string]any{"name": "agent", "version": "2.0.0"})
	card, _, err := unstructured.NestedMap(got.Object, "status", "card")
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"name": "agent", "version": "2.0.0"}, card, "the new card replaces the old one whole")
}
