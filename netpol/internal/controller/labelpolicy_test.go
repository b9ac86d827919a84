package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

const (
	verifiedLabel = "kagenti.io/signature-verified"
	agentcardUser = "system:serviceaccount:kagenti-system:kagenti-agentcard"
	labelPolicy   = "deploy/kustomize/netpol/signature-verified-label-policy.yaml"
)

// clientAs impersonates user. system:masters passes authorization, so what is tested is admission.
func clientAs(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters"}}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

// renderedLabelPolicy is the policy and its binding as the netpol-only overlay renders them
// (kubectl kustomize, from KUBEBUILDER_ASSETS like the API server).
func renderedLabelPolicy(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	out, err := exec.Command(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), "kustomize",
		filepath.Join(repoRoot(), "deploy/kustomize/overlays/netpol-only")).Output()
	require.NoError(t, err, "kubectl kustomize")
	var objs []*unstructured.Unstructured
	for _, u := range decodeAll(t, out) {
		if strings.HasPrefix(u.GetKind(), "ValidatingAdmissionPolicy") {
			objs = append(objs, u)
		}
	}
	require.Len(t, objs, 2, "the overlay ships the policy and its binding")
	return objs
}

// decodeAll reads the objects of a multi-document YAML stream.
func decodeAll(t *testing.T, raw []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out
		} else {
			require.NoError(t, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func labelledPod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "registry.example/agent:1"}}},
	}
}

// workloadWithTemplateLabels renders a workload of kind whose pod template carries templateLabels.
func workloadWithTemplateLabels(t *testing.T, ns, kind string, templateLabels map[string]string) *unstructured.Unstructured {
	t.Helper()
	labels, err := json.Marshal(templateLabels)
	require.NoError(t, err)
	tmpl := fmt.Sprintf("metadata: {labels: %s}\nspec: {containers: [{name: a, image: x}], restartPolicy: %s}",
		labels, map[bool]string{true: "Never", false: "Always"}[kind == "Job" || kind == "CronJob"])
	indent := func(s string, n int) string {
		return strings.ReplaceAll(s, "\n", "\n"+strings.Repeat(" ", n))
	}
	var doc string
	switch kind {
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet":
		doc = fmt.Sprintf("apiVersion: apps/v1\nkind: %s\nspec:\n  selector: {matchLabels: {app: x}}\n  template:\n    %s", kind, indent(tmpl, 4))
	case "Job":
		doc = fmt.Sprintf("apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    %s", indent(tmpl, 4))
	case "CronJob":
		doc = fmt.Sprintf("apiVersion: batch/v1\nkind: CronJob\nspec:\n  schedule: '0 0 * * *'\n  jobTemplate:\n    spec:\n      template:\n        %s", indent(tmpl, 8))
	case "ReplicationController":
		doc = fmt.Sprintf("apiVersion: v1\nkind: ReplicationController\nspec:\n  selector: {app: x}\n  template:\n    %s", indent(tmpl, 4))
	case "PodTemplate":
		doc = fmt.Sprintf("apiVersion: v1\nkind: PodTemplate\ntemplate:\n  %s", indent(tmpl, 2))
	default:
		t.Fatalf("no manifest for %s", kind)
	}
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object), doc)
	u.SetNamespace(ns)
	u.SetName(strings.ToLower(kind) + "-" + fmt.Sprint(len(templateLabels)))
	return u
}

func requireDenied(t *testing.T, err error, where string) {
	t.Helper()
	require.Error(t, err, "expected a denial")
	t.Logf("denied: %v", err)
	assert.True(t, apierrors.IsInvalid(err) || apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), verifiedLabel)
	assert.Contains(t, err.Error(), where)
}

// installLabelPolicy installs the shipped policy and its binding, removed when t ends, and waits
// until the API server enforces it (it compiles the policy in the background).
func installLabelPolicy(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	for _, u := range renderedLabelPolicy(t) {
		require.NoError(t, k8s.Create(ctx, u), "%s %s", u.GetKind(), u.GetName())
		t.Cleanup(func() { _ = k8s.Delete(ctx, u) })
	}
	alice := clientAs(t, "alice")
	eventuallyWithin(t, 60*time.Second, "the policy is enforced", func() (bool, string) {
		err := alice.Create(ctx, labelledPod(ns, "probe", map[string]string{verifiedLabel: "true"}), client.DryRunAll)
		return err != nil, fmt.Sprint(err)
	})
}

// TestSignatureVerifiedLabelPolicy installs the shipped ValidatingAdmissionPolicy and its binding
// and checks, on the real API server, that only agentcard's service account can set
// kagenti.io/signature-verified on pods and that nobody can put it in a workload's pod template.
func TestSignatureVerifiedLabelPolicy(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	installLabelPolicy(t, ns)
	alice, agentcard := clientAs(t, "alice"), clientAs(t, agentcardUser)

	err := alice.Create(ctx, labelledPod(ns, "forged", map[string]string{"app": "a", verifiedLabel: "true"}))
	requireDenied(t, err, "this pod")
	requireDenied(t, alice.Create(ctx, labelledPod(ns, "forged", map[string]string{verifiedLabel: "false"})), "this pod")

	// A pod without the label is fine; agentcard labels it; others may change other labels or
	// remove the label, not set it.
	require.NoError(t, alice.Create(ctx, labelledPod(ns, "agent", map[string]string{"app": "a"})))
	key := types.NamespacedName{Namespace: ns, Name: "agent"}
	patch := func(c client.Client, labels string) error {
		return c.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":`+labels+`}}`)))
	}
	requireDenied(t, patch(alice, `{"kagenti.io/signature-verified":"true"}`), "this pod")
	require.NoError(t, patch(agentcard, `{"kagenti.io/signature-verified":"true"}`), "agentcard's service account sets the label")
	require.NoError(t, patch(alice, `{"team":"b"}`), "other labels stay editable while the label is set")
	requireDenied(t, patch(alice, `{"kagenti.io/signature-verified":"false"}`), "this pod")
	require.NoError(t, patch(agentcard, `{"kagenti.io/signature-verified":"false"}`))
	require.NoError(t, patch(alice, `{"kagenti.io/signature-verified":null}`), "removing the label withdraws a claim: allowed")
	var p corev1.Pod
	require.NoError(t, k8s.Get(ctx, key, &p))
	assert.NotContains(t, p.Labels, verifiedLabel)
	assert.Equal(t, "b", p.Labels["team"])

	for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "ReplicationController", "PodTemplate"} {
		t.Run(kind, func(t *testing.T) {
			forged := workloadWithTemplateLabels(t, ns, kind, map[string]string{"app": "x", verifiedLabel: "true"})
			requireDenied(t, alice.Create(ctx, forged, client.DryRunAll), "the pod template of this "+kind)
			plain := workloadWithTemplateLabels(t, ns, kind, map[string]string{"app": "x"})
			require.NoError(t, alice.Create(ctx, plain, client.DryRunAll))
		})
	}
}

// A pods/status update keeps the labels it carries (the status strategy resets the spec, not the
// metadata): without pods/status in the policy, anyone allowed to write pod status — every kubelet
// for the pods of its node — could set the label. Only agentcard may, as through pods.
func TestSignatureVerifiedLabelCannotBeSetThroughPodStatus(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	installLabelPolicy(t, ns)
	alice, agentcard := clientAs(t, "alice"), clientAs(t, agentcardUser)
	require.NoError(t, alice.Create(ctx, labelledPod(ns, "agent", map[string]string{"app": "a"})))
	key := types.NamespacedName{Namespace: ns, Name: "agent"}
	statusPatch := func(c client.Client, labels string) error {
		return c.Status().Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":`+labels+`}}`)))
	}
	label := func() (string, bool) {
		var p corev1.Pod
		require.NoError(t, k8s.Get(ctx, key, &p))
		v, ok := p.Labels[verifiedLabel]
		return v, ok
	}

	// The status subresource does keep label edits: another label goes through.
	require.NoError(t, statusPatch(alice, `{"team":"b"}`))
	var p corev1.Pod
	require.NoError(t, k8s.Get(ctx, key, &p))
	require.Equal(t, "b", p.Labels["team"], "pods/status keeps the labels it carries")

	requireDenied(t, statusPatch(alice, `{"kagenti.io/signature-verified":"true"}`), "this pod")
	_, set := label()
	require.False(t, set, "set through pods/status")

	// A whole-object status update (as a client that GETs, edits and PUTs) is refused alike.
	require.NoError(t, k8s.Get(ctx, key, &p))
	p.Labels[verifiedLabel] = "true"
	requireDenied(t, alice.Status().Update(ctx, &p), "this pod")

	require.NoError(t, statusPatch(agentcard, `{"kagenti.io/signature-verified":"false"}`), "agentcard's service account writes it through pods/status too")
	requireDenied(t, statusPatch(alice, `{"kagenti.io/signature-verified":"true"}`), "this pod")
	v, _ := label()
	require.Equal(t, "false", v, "changed through pods/status")
	require.NoError(t, statusPatch(agentcard, `{"kagenti.io/signature-verified":"true"}`))
	require.NoError(t, statusPatch(alice, `{"team":"c"}`), "other labels stay editable while the label is set")

	// Removing withdraws a claim: allowed, as through pods (a pod without the label is unverified).
	require.NoError(t, statusPatch(alice, `{"kagenti.io/signature-verified":null}`))
	_, set = label()
	require.False(t, set)
}

// The other ways to write a Pod or a workload without the policy's resources: the subresources that
// take a whole Pod but keep only their part of it (ephemeralcontainers, resize), and the workloads'
// /status, whose strategies keep the stored spec and with it the pod template. A label sent through
// them is dropped by the API server, so the policy does not need them; this holds it on the real
// API server, without the policy installed.
func TestSignatureVerifiedLabelIsDroppedByOtherSubresources(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	alice := clientAs(t, "alice")
	pod := labelledPod(ns, "agent", map[string]string{"app": "a"})
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")},
	}
	require.NoError(t, alice.Create(ctx, pod))
	key := client.ObjectKeyFromObject(pod)

	t.Run("pods/ephemeralcontainers", func(t *testing.T) {
		var p corev1.Pod
		require.NoError(t, k8s.Get(ctx, key, &p))
		p.Labels[verifiedLabel] = "true"
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox:1", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent}})
		require.NoError(t, alice.SubResource("ephemeralcontainers").Update(ctx, &p))
		var got corev1.Pod
		require.NoError(t, k8s.Get(ctx, key, &got))
		require.Len(t, got.Spec.EphemeralContainers, 1, "the subresource's own part is kept")
		require.NotContains(t, got.Labels, verifiedLabel, "its metadata is reset")
	})
	t.Run("pods/resize", func(t *testing.T) {
		var p corev1.Pod
		require.NoError(t, k8s.Get(ctx, key, &p))
		p.Labels[verifiedLabel] = "true"
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("150m")
		require.NoError(t, alice.SubResource("resize").Update(ctx, &p))
		var got corev1.Pod
		require.NoError(t, k8s.Get(ctx, key, &got))
		require.Equal(t, "150m", got.Spec.Containers[0].Resources.Requests.Cpu().String(), "the subresource's own part is kept")
		require.NotContains(t, got.Labels, verifiedLabel, "its metadata is reset")
	})
	for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "ReplicationController"} {
		t.Run(strings.ToLower(kind)+"s/status", func(t *testing.T) {
			w := workloadWithTemplateLabels(t, ns, kind, map[string]string{"app": "x"})
			require.NoError(t, alice.Create(ctx, w))
			path := []string{"spec", "template", "metadata", "labels"}
			if kind == "CronJob" {
				path = []string{"spec", "jobTemplate", "spec", "template", "metadata", "labels"}
			}
			require.NoError(t, unstructured.SetNestedStringMap(w.Object, map[string]string{"app": "x", verifiedLabel: "true"}, path...))
			require.NoError(t, alice.Status().Update(ctx, w))
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(w.GroupVersionKind())
			require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(w), got))
			labels, _, err := unstructured.NestedStringMap(got.Object, path...)
			require.NoError(t, err)
			require.NotContains(t, labels, verifiedLabel, "the status strategy keeps the stored pod template")
		})
	}
}

// The helm subchart ships the same policy, with the service account's namespace templated.
func TestSignatureVerifiedLabelPolicyHelmCopy(t *testing.T) {
	kustomize, err := os.ReadFile(filepath.Join(repoRoot(), labelPolicy))
	require.NoError(t, err)
	helm, err := os.ReadFile(filepath.Join(repoRoot(), "deploy/helm/kagenti/charts/netpol/templates/signature-verified-label-policy.yaml"))
	require.NoError(t, err)
	want := strings.ReplaceAll(string(kustomize), "system:serviceaccount:kagenti-system:kagenti-agentcard", "system:serviceaccount:{{ .Release.Namespace }}:kagenti-agentcard")
	got := string(helm)
	got = strings.TrimPrefix(got, "{{- if .Values.signatureVerifiedLabelPolicy }}\n")
	got = strings.TrimSuffix(got, "{{- end }}\n")
	assert.Equal(t, want, got, "the helm template must be the kustomize file with {{ .Release.Namespace }}")
}
