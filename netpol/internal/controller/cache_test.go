package controller

import (
	"encoding/json"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/kagenti/platform/netpol/api"
	"github.com/kagenti/platform/netpol/internal/resources"
	"github.com/kagenti/platform/netpol/internal/view"
	"github.com/kagenti/platform/pkg/duck"
)

// TestCacheKeepsWhatNetpolReads: the workload caches hold a workload's selector and template labels,
// from which the policy is rendered exactly as from the whole object, and nothing else of its spec.
func TestCacheKeepsWhatNetpolReads(t *testing.T) {
	transforms := map[string]func(any) (any, error){}
	for obj, by := range CacheByObject() {
		gvk, err := apiutil.GVKForObject(obj, clientgoscheme.Scheme)
		require.NoError(t, err)
		if by.Transform != nil {
			transforms[gvk.Kind] = by.Transform
		}
	}
	for _, gvk := range duck.BuiltinKinds() {
		require.Contains(t, transforms, gvk.Kind, "the %s cache is trimmed", gvk.Kind)
	}
	d := deploymentObject("trim", "default")
	d.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	d.UID, d.ResourceVersion, d.Generation, d.CreationTimestamp = "u-1", "42", 3, metav1.Now()
	d.Labels = map[string]string{"app.kubernetes.io/name": "trim", "helm.sh/chart": "trim-1.0.0"}
	d.Annotations = map[string]string{"deployment.kubernetes.io/revision": "3", "meta.helm.sh/release-name": "trim"}
	d.OwnerReferences = []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "App", Name: "trim", UID: "u-0"}}
	gvk := appsv1.SchemeGroupVersion.WithKind("Deployment")
	trimmedObj, err := transforms["Deployment"](d.DeepCopy())
	require.NoError(t, err)
	trimmed := trimmedObj.(*appsv1.Deployment)

	assert.Equal(t, metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, UID: d.UID, ResourceVersion: d.ResourceVersion, Generation: d.Generation},
		trimmed.ObjectMeta, "of the metadata only what identifies the workload; labels, annotations, owners are not read")
	assert.Equal(t, corev1.PodTemplateSpec{}, trimmed.Spec.Template, "spec.selector selects the pods: the template is not cached")
	want, err := duck.NewWorkloadFromObject(d, gvk)
	require.NoError(t, err)
	got, err := duck.NewWorkloadFromObject(trimmed, gvk)
	require.NoError(t, err)
	wantSel, err := resources.WorkloadPodSelector(want)
	require.NoError(t, err)
	gotSel, err := resources.WorkloadPodSelector(got)
	require.NoError(t, err)
	assert.Equal(t, wantSel, gotSel)

	// A CronJob's pods are selected by its pod template's labels: those are kept.
	cron := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "default", Labels: map[string]string{"team": "x"}},
		Spec: batchv1.CronJobSpec{Schedule: "0 0 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "nightly"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "x"}}, RestartPolicy: corev1.RestartPolicyNever},
		}}}},
	}
	cronGVK := batchv1.SchemeGroupVersion.WithKind("CronJob")
	trimmedObj, err = transforms["CronJob"](cron.DeepCopy())
	require.NoError(t, err)
	trimmedCron := trimmedObj.(*batchv1.CronJob)
	assert.Equal(t, map[string]string{"app": "nightly"}, trimmedCron.Spec.JobTemplate.Spec.Template.Labels)
	assert.Empty(t, trimmedCron.Labels)
	assert.Empty(t, trimmedCron.Spec.JobTemplate.Spec.Template.Spec.Containers, "containers are not cached")
	want, err = duck.NewWorkloadFromObject(cron, cronGVK)
	require.NoError(t, err)
	got, err = duck.NewWorkloadFromObject(trimmedCron, cronGVK)
	require.NoError(t, err)
	wantSel, err = resources.WorkloadPodSelector(want)
	require.NoError(t, err)
	gotSel, err = resources.WorkloadPodSelector(got)
	require.NoError(t, err)
	assert.Equal(t, wantSel, gotSel)
}

// TestCacheKeepsOfAgentCardsWhatNetpolReads: the AgentCard cache holds what the reconciler, the
// target index and the status writer read — parsed and indexed exactly as the whole card — and not
// the A2A card, pod entries and signature results agentcard keeps in the status.
func TestCacheKeepsOfAgentCardsWhatNetpolReads(t *testing.T) {
	trim := DefaultTransform()

	full := &unstructured.Unstructured{}
	require.NoError(t, json.Unmarshal([]byte(`{
		"apiVersion": "kagenti.io/v1alpha1", "kind": "AgentCard",
		"metadata": {"name": "weather-card", "namespace": "team", "uid": "u-1", "generation": 3, "resourceVersion": "42",
			"labels": {"app": "weather"},
			"annotations": {"team": "x", "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}"},
			"managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
		"spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "weather"},
			"identityBinding": {"spiffeID": "spiffe://cluster.local/ns/team/sa/weather"}, "syncPeriod": "30s"},
		"status": {"observedGeneration": 3, "phase": "Active", "cardHash": "abc",
			"conditions": [
				{"type": "Ready", "status": "True", "reason": "CardAvailable", "message": "card available", "lastTransitionTime": "2026-01-01T00:00:00Z"},
				{"type": "SignatureVerified", "status": "True", "reason": "Verified", "message": "ok", "observedGeneration": 3, "lastTransitionTime": "2026-01-01T00:00:00Z"},
				{"type": "Verified", "status": "True", "reason": "Verified", "message": "ok", "observedGeneration": 3, "lastTransitionTime": "2026-01-01T00:00:00Z"},
				{"type": "NetworkPolicyReady", "status": "True", "reason": "PermissivePolicyApplied", "message": "m", "observedGeneration": 3, "lastTransitionTime": "2026-01-01T00:00:00Z"}],
			"cards": [{"podName": "weather-1", "fetchStatus": "Success"}],
			"card": {"name": "Weather", "skills": [{"id": "forecast", "description": "a long description"}], "signatures": [{"protected": "x", "signature": "y"}]},
			"signature": {"verified": true, "spiffeID": "spiffe://cluster.local/ns/team/sa/weather"}}
	}`), &full.Object))

	obj, err := trim(full.DeepCopy())
	require.NoError(t, err)
	trimmed := obj.(*unstructured.Unstructured)

	want, err := view.FromUnstructured(full)
	require.NoError(t, err)
	got, err := view.FromUnstructured(trimmed)
	require.NoError(t, err)
	assert.Equal(t, want.Verify(), got.Verify(), "the verdict")
	assert.Equal(t, want.Condition(api.ConditionNetworkPolicyReady), got.Condition(api.ConditionNetworkPolicyReady))
	want.Conditions, got.Conditions = nil, nil
	assert.Equal(t, want, got, "name, UID, generation, target, selector")
	wantStatus, gotStatus := view.StatusOf(full), view.StatusOf(trimmed)
	assert.Equal(t, wantStatus.ObjectMeta, gotStatus.ObjectMeta)
	assert.Equal(t, wantStatus.Status.ObservedGeneration, gotStatus.Status.ObservedGeneration)
	assert.Equal(t, wantStatus.Status.Condition(api.ConditionNetworkPolicyReady), gotStatus.Status.Condition(api.ConditionNetworkPolicyReady))
	assert.Equal(t, cardTargetKey(full), cardTargetKey(trimmed))
	assert.Len(t, gotStatus.Status.Conditions, 2, "Verified and NetworkPolicyReady; agentcard's others are not kept")
	assert.Equal(t, full.GroupVersionKind(), trimmed.GroupVersionKind())
	assert.Equal(t, full.GetLabels(), trimmed.GetLabels())

	assert.Empty(t, trimmed.GetManagedFields())
	assert.Equal(t, map[string]string{"team": "x"}, trimmed.GetAnnotations(), "kubectl's last-applied copy is dropped")
	assert.Equal(t, []string{"conditions", "observedGeneration"}, fieldNames(trimmed.Object["status"]), "the status keeps only what netpol reads")
	assert.Equal(t, []string{"targetRef"}, fieldNames(trimmed.Object["spec"]))

	// Selector mode keeps spec.selector.
	full.Object["spec"] = map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "weather"}}}
	obj, err = trim(full.DeepCopy())
	require.NoError(t, err)
	got, err = view.FromUnstructured(obj.(*unstructured.Unstructured))
	require.NoError(t, err)
	assert.Equal(t, &metav1.LabelSelector{MatchLabels: map[string]string{"app": "weather"}}, got.Selector)
}

func fieldNames(m any) []string {
	out := []string{}
	for k := range m.(map[string]any) {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
