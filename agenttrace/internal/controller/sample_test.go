package controller

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
)

// deploy/samples/agenttrace.yaml is accepted by the API server and becomes Active for an injected
// weather-agent, with no warning: a newcomer's first status is not DeprecatedExporter.
func TestSampleIsValid(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(crdDir(), "..", "..", "samples", "agenttrace.yaml"))
	require.NoError(t, err)
	var at v1alpha1.AgentTrace
	require.NoError(t, yaml.UnmarshalStrict(b, &at))
	ns := newNamespace(t)
	at.Namespace = ns
	deployment(t, ns, at.Spec.TargetRef.Name, true)
	create(t, &at)
	got := waitStatus(t, ns, at.Name, v1alpha1.PhaseActive, v1alpha1.ReasonActive)
	require.Equal(t, metav1.ConditionTrue, findCond(got, v1alpha1.ConditionReady).Status)
	var cm corev1.ConfigMap
	require.NoError(t, k8s.Get(ctx, keyOf(ns, "weather-agent-trace"), &cm))
	require.Equal(t, "otel-collector.observability:4317", cm.Data["otel_endpoint"])
}
