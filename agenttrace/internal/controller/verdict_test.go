package controller

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/ducktest"
)

// TestGitOpsVerdicts drives AgentTraces into every state the controller reports and checks what
// kstatus (Flux, kubectl-wait tooling) and the shipped Argo CD health script conclude from the
// object read back from the API server: InProgress right after create, while the target is missing
// and for a spec not observed yet; Current when Ready; Failed for every terminal reason.
func TestGitOpsVerdicts(t *testing.T) {
	ns := newNamespace(t)

	// Right after create, before the controller has seen it: the CRD defaults status to
	// observedGeneration 0 (the create response is the object as stored).
	fresh := toUnstructured(t, agentTrace(ns, "fresh", "fresh-target"))
	delete(fresh.Object, "status")
	require.NoError(t, k8s.Create(ctx, fresh))
	observed, found, _ := unstructured.NestedInt64(fresh.Object, "status", "observedGeneration")
	assert.True(t, found, "status.observedGeneration defaulted: %v", fresh.Object["status"])
	assert.Equal(t, int64(0), observed)
	checkVerdict(t, fresh, kstatus.InProgressStatus, "Progressing", "right after create")

	deployment(t, ns, "injected", true)
	deployment(t, ns, "plain", false)
	deployment(t, ns, "taken", true)
	require.NoError(t, k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-trace"}}))
	create(t, agentTrace(ns, "in-effect", "injected"))
	waitStatus(t, ns, "in-effect", v1alpha1.PhaseActive, v1alpha1.ReasonActive)
	tests := []struct {
		name    string
		trace   func(name string) *v1alpha1.AgentTrace
		phase   v1alpha1.Phase
		reason  string
		verdict kstatus.Status
		argo    string
	}{{
		name:  "active",
		trace: func(name string) *v1alpha1.AgentTrace { return agentTrace(ns, name, "injected-too") },
		phase: v1alpha1.PhaseActive, reason: v1alpha1.ReasonActive, verdict: kstatus.CurrentStatus, argo: "Healthy",
	}, {
		name:  "target not injected",
		trace: func(name string) *v1alpha1.AgentTrace { return agentTrace(ns, name, "plain") },
		phase: v1alpha1.PhaseActive, reason: v1alpha1.ReasonTargetNotInjected, verdict: kstatus.CurrentStatus, argo: "Healthy",
	}, {
		name: "deprecated exporter",
		trace: func(name string) *v1alpha1.AgentTrace {
			at := agentTrace(ns, name, "other-injected")
			at.Spec.Exporters = append(at.Spec.Exporters, v1alpha1.Exporter{Type: v1alpha1.ExporterJaeger, Endpoint: "jaeger:14250"})
			return at
		},
		phase: v1alpha1.PhaseActive, reason: v1alpha1.ReasonDeprecatedExporter, verdict: kstatus.CurrentStatus, argo: "Healthy",
	}, {
		name:  "target not found",
		trace: func(name string) *v1alpha1.AgentTrace { return agentTrace(ns, name, "missing") },
		phase: v1alpha1.PhasePending, reason: duck.ReasonTargetNotFound, verdict: kstatus.InProgressStatus, argo: "Progressing",
	}, {
		name: "unsupported kind",
		trace: func(name string) *v1alpha1.AgentTrace {
			at := agentTrace(ns, name, "x")
			at.Spec.TargetRef = duck.TargetRef{APIVersion: "example.com/v1", Kind: "Agent", Name: "x"}
			return at
		},
		phase: v1alpha1.PhaseError, reason: duck.ReasonUnsupportedKind, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name:  "conflict with an older AgentTrace",
		trace: func(name string) *v1alpha1.AgentTrace { return agentTrace(ns, name, "injected") },
		phase: v1alpha1.PhaseError, reason: v1alpha1.ReasonConflict, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name:  "ConfigMap not owned",
		trace: func(name string) *v1alpha1.AgentTrace { return agentTrace(ns, name, "taken") },
		phase: v1alpha1.PhaseError, reason: v1alpha1.ReasonConfigMapNotOwned, verdict: kstatus.FailedStatus, argo: "Degraded",
	}}
	deployment(t, ns, "injected-too", true)
	deployment(t, ns, "other-injected", true)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("state-%d", i)
			create(t, tt.trace(name))
			got := waitStatus(t, ns, name, tt.phase, tt.reason)
			ready := got.Status.Condition(v1alpha1.ConditionReady)
			reconciling, stalled := got.Status.Condition(duck.ConditionReconciling), got.Status.Condition(duck.ConditionStalled)
			switch tt.verdict {
			case kstatus.InProgressStatus:
				assert.Equal(t, metav1.ConditionFalse, ready.Status)
				require.NotNil(t, reconciling, "Reconciling")
				assert.Equal(t, tt.reason, reconciling.Reason)
				assert.Nil(t, stalled)
			case kstatus.FailedStatus:
				assert.Equal(t, metav1.ConditionFalse, ready.Status)
				require.NotNil(t, stalled, "Stalled")
				assert.Equal(t, tt.reason, stalled.Reason)
				assert.Equal(t, ready.Message, stalled.Message)
				assert.Nil(t, reconciling)
			default:
				assert.Equal(t, metav1.ConditionTrue, ready.Status)
				assert.Nil(t, reconciling)
				assert.Nil(t, stalled)
			}
			assertVerdict(t, ns, name, tt.verdict, tt.argo, tt.name)
		})
	}

	// A spec change the controller has not observed yet reads as in progress again, even on an
	// AgentTrace that was Ready (the update response is the object as stored).
	at := getAT(t, ns, "in-effect")
	require.True(t, at.Status.IsReady())
	at.Spec.Sampling = &v1alpha1.Sampling{Type: "always_off"}
	u := toUnstructured(t, at)
	require.NoError(t, k8s.Update(ctx, u))
	checkVerdict(t, u, kstatus.InProgressStatus, "Progressing", "new generation")
	waitStatus(t, ns, "in-effect", v1alpha1.PhaseActive, v1alpha1.ReasonActive)
	assertVerdict(t, ns, "in-effect", kstatus.CurrentStatus, "Healthy", "new generation observed")
}

func toUnstructured(t *testing.T, at *v1alpha1.AgentTrace) *unstructured.Unstructured {
	t.Helper()
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(at)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: raw}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("AgentTrace"))
	return u
}

// assertVerdict reads the AgentTrace back as GitOps tools do (unstructured) and checks their verdicts.
func assertVerdict(t *testing.T, ns, name string, want kstatus.Status, argo, state string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("AgentTrace"))
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u))
	checkVerdict(t, u, want, argo, state)
}

// checkVerdict checks what kstatus and the shipped Argo CD health script conclude from u.
func checkVerdict(t *testing.T, u *unstructured.Unstructured, want kstatus.Status, argo, state string) {
	t.Helper()
	ducktest.AssertVerdict(t, u, want, argo, state)
}
