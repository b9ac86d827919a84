package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kagenti/platform/netpol/internal/resources"
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
