package controller_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// renderedWorkloadLabelsPolicy is the policy and its binding as the agentcard-only overlay renders
// them (kubectl kustomize, from the envtest assets).
func renderedWorkloadLabelsPolicy(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(repoRoot(), "bin")
	}
	out, err := exec.Command(filepath.Join(assets, "kubectl"), "kustomize",
		filepath.Join(repoRoot(), "deploy/kustomize/overlays/agentcard-only")).Output()
	require.NoError(t, err, "kubectl kustomize")
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		if strings.HasPrefix(u.GetKind(), "ValidatingAdmissionPolicy") {
			objs = append(objs, u)
		}
	}
	require.Len(t, objs, 2, "the overlay ships the policy and its binding")
	return objs
}

// workloadsLabelled returns one workload of each kind AgentCardSync serves, with labels and
// annotations on the workload itself.
func workloadsLabelled(ns string, labels, annotations map[string]string) map[string]client.Object {
	meta := func(kind string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: strings.ToLower(kind), Labels: labels, Annotations: annotations}
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
	tmpl := func(restart corev1.RestartPolicy) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
			Spec: corev1.PodSpec{RestartPolicy: restart, Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}}}
	}
	return map[string]client.Object{
		"Deployment":  &appsv1.Deployment{ObjectMeta: meta("Deployment"), Spec: appsv1.DeploymentSpec{Selector: sel, Template: tmpl(corev1.RestartPolicyAlways)}},
		"StatefulSet": &appsv1.StatefulSet{ObjectMeta: meta("StatefulSet"), Spec: appsv1.StatefulSetSpec{Selector: sel, Template: tmpl(corev1.RestartPolicyAlways)}},
		"DaemonSet":   &appsv1.DaemonSet{ObjectMeta: meta("DaemonSet"), Spec: appsv1.DaemonSetSpec{Selector: sel, Template: tmpl(corev1.RestartPolicyAlways)}},
		"Job":         &batchv1.Job{ObjectMeta: meta("Job"), Spec: batchv1.JobSpec{Template: tmpl(corev1.RestartPolicyNever)}},
		"CronJob": &batchv1.CronJob{ObjectMeta: meta("CronJob"), Spec: batchv1.CronJobSpec{Schedule: "0 0 * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl(corev1.RestartPolicyNever)}}}},
	}
}

func requireDeniedWith(t *testing.T, err error, message string) {
	t.Helper()
	require.Error(t, err, "expected a denial")
	assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
	assert.Contains(t, err.Error(), message)
}

// TestWorkloadLabelsPolicy installs the shipped ValidatingAdmissionPolicy and checks on the real API
// server that a kagenti.io/type or kagenti.io/discovery value agentcard would ignore is denied with
// the key and the accepted values, on every kind AgentCardSync serves, and that a value stored
// before the policy existed does not block updates that keep it.
func TestWorkloadLabelsPolicy(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	legacy := agentDeployment(ns, "legacy", map[string]string{v1alpha1.LabelType: "service"}, nil)
	require.NoError(t, k8s.Create(ctx, legacy), "stored before the policy is installed")

	for _, u := range renderedWorkloadLabelsPolicy(t) {
		require.NoError(t, k8s.Create(ctx, u), "%s %s", u.GetKind(), u.GetName())
		t.Cleanup(func() { _ = k8s.Delete(ctx, u) })
	}
	eventually(t, 60*time.Second, func() string {
		err := k8s.Create(ctx, agentDeployment(ns, "probe", map[string]string{v1alpha1.LabelType: "Agent"}, nil), client.DryRunAll)
		if err == nil {
			return "the policy is not enforced yet"
		}
		return ""
	})

	typeMsg := `label kagenti.io/type: invalid value "Agent": accepted values: agent (kagenti-agentcard creates an AgentCard for the workload), tool (a tool: no AgentCard)`
	discoveryMsg := `annotation kagenti.io/discovery: invalid value "off": accepted values: disabled (no auto-created AgentCard), enabled (the default)`
	for kind, obj := range workloadsLabelled(ns, map[string]string{v1alpha1.LabelType: "Agent"}, nil) {
		t.Run(kind+"/type", func(t *testing.T) {
			err := k8s.Create(ctx, obj, client.DryRunAll)
			requireDeniedWith(t, err, typeMsg)
			t.Logf("denied: %v", err)
		})
	}
	for kind, obj := range workloadsLabelled(ns, map[string]string{v1alpha1.LabelType: "agent"}, map[string]string{v1alpha1.AnnotationDiscovery: "off"}) {
		t.Run(kind+"/discovery", func(t *testing.T) {
			err := k8s.Create(ctx, obj, client.DryRunAll)
			requireDeniedWith(t, err, discoveryMsg)
			t.Logf("denied: %v", err)
		})
	}
	for _, discovery := range []string{"disabled", "Disabled", "enabled"} {
		for kind, obj := range workloadsLabelled(ns, map[string]string{v1alpha1.LabelType: "agent"}, map[string]string{v1alpha1.AnnotationDiscovery: discovery}) {
			require.NoError(t, k8s.Create(ctx, obj, client.DryRunAll), "%s with discovery %s", kind, discovery)
		}
	}
	for kind, obj := range workloadsLabelled(ns, map[string]string{"app": "other"}, map[string]string{"note": "x"}) {
		require.NoError(t, k8s.Create(ctx, obj, client.DryRunAll), "%s without agentcard's keys", kind)
	}
	for _, obj := range workloadsLabelled(ns, nil, map[string]string{v1alpha1.AnnotationDiscovery: "maybe"}) {
		requireDeniedWith(t, k8s.Create(ctx, obj, client.DryRunAll), `annotation kagenti.io/discovery: invalid value "maybe"`)
	}

	// The workload stored before the policy keeps its value through updates; changing the value
	// to another invalid one is denied, to agent allowed.
	patch := func(body string) error {
		return k8s.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "legacy"}},
			client.RawPatch(types.MergePatchType, []byte(body)))
	}
	require.NoError(t, patch(`{"spec":{"replicas":3}}`), "an update that keeps the stored value")
	requireDeniedWith(t, patch(`{"metadata":{"labels":{"kagenti.io/type":"tools"}}}`), `label kagenti.io/type: invalid value "tools"`)
	require.NoError(t, patch(`{"metadata":{"labels":{"kagenti.io/type":"tool"}}}`), "a tool: no card, but a value kagenti knows")
	require.NoError(t, patch(`{"metadata":{"labels":{"kagenti.io/type":"agent"}}}`))
	requireDeniedWith(t, patch(`{"metadata":{"labels":{"kagenti.io/type":"service"}}}`), `label kagenti.io/type: invalid value "service"`)

	// A /status update keeps the metadata it carries (a Deployment's status strategy resets the
	// labels but not the annotations): the policy covers the status subresources, or the values
	// above would go in through them.
	for kind, obj := range workloadsLabelled(ns, map[string]string{v1alpha1.LabelType: "agent"}, nil) {
		t.Run(kind+"/status", func(t *testing.T) {
			require.NoError(t, k8s.Create(ctx, obj))
			statusPatch := func(meta string) error {
				return k8s.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":`+meta+`}`)))
			}
			requireDeniedWith(t, statusPatch(`{"annotations":{"kagenti.io/discovery":"off"}}`), discoveryMsg)
			if kind == "Deployment" {
				require.NoError(t, statusPatch(`{"labels":{"kagenti.io/type":"Agent"}}`), "deployments/status resets the labels")
			} else {
				requireDeniedWith(t, statusPatch(`{"labels":{"kagenti.io/type":"Agent"}}`), typeMsg)
			}
			require.NoError(t, statusPatch(`{"annotations":{"note":"kept"}}`), "other metadata stays writable through status")
			got := obj.DeepCopyObject().(client.Object)
			require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(obj), got))
			assert.Equal(t, "agent", got.GetLabels()[v1alpha1.LabelType])
			assert.NotContains(t, got.GetAnnotations(), v1alpha1.AnnotationDiscovery)
			assert.Equal(t, "kept", got.GetAnnotations()["note"], "status updates keep the metadata they carry")
		})
	}
}

// The helm subchart ships the same policy, behind workloadLabelsPolicy.
func TestWorkloadLabelsPolicyHelmCopy(t *testing.T) {
	kustomize, err := os.ReadFile(filepath.Join(repoRoot(), "deploy/kustomize/agentcard/workload-labels-policy.yaml"))
	require.NoError(t, err)
	helm, err := os.ReadFile(filepath.Join(repoRoot(), "deploy/helm/kagenti/charts/agentcard/templates/workload-labels-policy.yaml"))
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("{{- if .Values.workloadLabelsPolicy }}\n%s{{- end }}\n", kustomize), string(helm))
}
