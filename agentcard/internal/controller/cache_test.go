package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/pkg/duck"
)

// The suite's manager runs on controller.CacheOptions, as the binary does: the workloads it caches
// carry no managedFields, annotations or fields agentcard does not read, and a card whose target
// is read from that cache (its pods from the controller's own pod informers, which keep the small
// pod type: TestPodKeepsWhatAgentcardReads) is still verified and labelled.
func TestControllerWorksOnTrimmedCaches(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	labels := map[string]string{"app": "lean"}
	bulky := map[string]string{"example.com/notes": strings.Repeat("x", 2048)}
	env := []corev1.EnvVar{{Name: "UNREAD", Value: strings.Repeat("y", 1024)}}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lean", Annotations: bulky},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: bulky},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1", Env: env}}}},
		},
	}
	require.NoError(t, k8s.Create(ctx, dep))
	id := "spiffe://cluster.local/ns/" + ns + "/sa/lean"
	serveCard(t, "127.42.8.1", signedCard(t, ca, id, "1.0.0"))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lean-a", Labels: labels, Annotations: bulky},
		Spec: corev1.PodSpec{ServiceAccountName: "lean", Containers: []corev1.Container{{Name: "agent", Image: "agent:1", Env: env,
			Ports: []corev1.ContainerPort{{Name: "a2a", ContainerPort: cardPort, Protocol: corev1.ProtocolTCP}}}}},
	}
	require.NoError(t, k8s.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.42.8.1", PodIPs: []corev1.PodIP{{IP: "127.42.8.1"}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	require.NoError(t, k8s.Status().Update(ctx, pod))
	require.NoError(t, k8s.Create(ctx, &v1alpha1.AgentCard{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lean"},
		Spec:       v1alpha1.AgentCardSpec{TargetRef: &duck.TargetRef{Kind: "Deployment", Name: "lean"}},
	}))

	eventually(t, 20*time.Second, func() string {
		c := getCard(t, ns, "lean")
		var p corev1.Pod
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(pod), &p))
		if cond(c, "Ready") != "True/CardAvailable" || p.Labels[v1alpha1.LabelSignatureVerified] != "true" {
			return fmt.Sprintf("Ready=%s label=%q", cond(c, "Ready"), p.Labels[v1alpha1.LabelSignatureVerified])
		}
		return ""
	})

	cw := &unstructured.Unstructured{}
	cw.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	require.NoError(t, cached.Get(ctx, client.ObjectKeyFromObject(dep), cw))
	assert.Empty(t, cw.GetManagedFields(), "cached workload keeps managedFields")
	tmplMeta, _, _ := unstructured.NestedMap(cw.Object, "spec", "template", "metadata")
	assert.Equal(t, map[string]any{"labels": map[string]any{"app": "lean"}}, tmplMeta,
		"cached workload keeps only its pod template's labels")
	containers, _, _ := unstructured.NestedFieldNoCopy(cw.Object, "spec", "template", "spec", "containers")
	assert.Nil(t, containers, "cached workload keeps its pod template's containers")
	_, hasStrategy, _ := unstructured.NestedFieldNoCopy(cw.Object, "spec", "strategy")
	assert.False(t, hasStrategy, "cached workload keeps spec fields agentcard does not read")

	var cc v1alpha1.AgentCard
	require.NoError(t, cached.Get(ctx, client.ObjectKey{Namespace: ns, Name: "lean"}, &cc))
	assert.Empty(t, cc.ManagedFields, "cached AgentCard keeps managedFields")
}
