package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/pkg/duck"
)

func agentDeployment(ns, name string, labels map[string]string, annotations map[string]string) *appsv1.Deployment {
	sel := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}}},
		},
	}
}

func cardExists(ns, name string) (bool, *v1alpha1.AgentCard) {
	var c v1alpha1.AgentCard
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &c)
	return err == nil, &c
}

func TestAutoCreation(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	agent := map[string]string{v1alpha1.LabelType: "agent"}
	dep := agentDeployment(ns, "weather-agent", agent, nil)
	require.NoError(t, k8s.Create(ctx, dep))
	require.NoError(t, k8s.Create(ctx, agentDeployment(ns, "tool", map[string]string{v1alpha1.LabelType: "tool"}, nil)))
	require.NoError(t, k8s.Create(ctx, agentDeployment(ns, "private", agent, map[string]string{v1alpha1.AnnotationDiscovery: "disabled"})))

	var card *v1alpha1.AgentCard
	eventually(t, 10*time.Second, func() string {
		ok, c := cardExists(ns, "weather-agent-deployment-card")
		if !ok {
			return "not created"
		}
		card = c
		return ""
	})
	require.NotNil(t, card.Spec.TargetRef)
	assert.Equal(t, duck.TargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "weather-agent"}, *card.Spec.TargetRef)
	assert.Equal(t, "kagenti-agentcard", card.Labels["app.kubernetes.io/managed-by"])
	require.Len(t, card.OwnerReferences, 1)
	assert.Equal(t, dep.UID, card.OwnerReferences[0].UID)

	// A user's edit is kept.
	// (The controller writes the card's status meanwhile, so the edit is retried on conflicts.)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(card), card); err != nil {
			return err
		}
		card.Spec.SyncPeriod = &metav1.Duration{Duration: 2 * time.Minute}
		card.Spec.Metadata = &v1alpha1.CardMetadata{Tags: []string{"prod"}}
		return k8s.Update(ctx, card)
	}))
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep))
	dep.Annotations = map[string]string{"touched": "yes"}
	dep.Labels["team"] = "a" // label change triggers AgentCardSync again
	require.NoError(t, k8s.Update(ctx, dep))
	time.Sleep(time.Second)
	_, c := cardExists(ns, "weather-agent-deployment-card")
	assert.Equal(t, 2*time.Minute, c.Spec.SyncPeriod.Duration, "user edits are never reverted")

	for _, n := range []string{"tool-deployment-card", "private-deployment-card"} {
		ok, _ := cardExists(ns, n)
		assert.False(t, ok, n)
	}

	// Opting out removes the auto-created card.
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep))
	dep.Annotations[v1alpha1.AnnotationDiscovery] = "disabled"
	require.NoError(t, k8s.Update(ctx, dep))
	eventually(t, 10*time.Second, func() string {
		if ok, _ := cardExists(ns, "weather-agent-deployment-card"); ok {
			return "still there after opt-out"
		}
		return ""
	})
	delete(dep.Annotations, v1alpha1.AnnotationDiscovery)
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(dep), dep))
	delete(dep.Annotations, v1alpha1.AnnotationDiscovery)
	require.NoError(t, k8s.Update(ctx, dep))
	eventually(t, 10*time.Second, func() string {
		if ok, _ := cardExists(ns, "weather-agent-deployment-card"); !ok {
			return "not re-created after opting back in"
		}
		return ""
	})

	// A user-made AgentCard for the same workload replaces the auto-created one.
	user := &v1alpha1.AgentCard{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "my-weather"},
		Spec:       v1alpha1.AgentCardSpec{TargetRef: &duck.TargetRef{Kind: "Deployment", Name: "weather-agent"}},
	}
	require.NoError(t, k8s.Create(ctx, user))
	eventually(t, 10*time.Second, func() string {
		if ok, _ := cardExists(ns, "weather-agent-deployment-card"); ok {
			return "auto-created card still there next to the user's"
		}
		return ""
	})
	time.Sleep(500 * time.Millisecond)
	ok, _ := cardExists(ns, "weather-agent-deployment-card")
	assert.False(t, ok, "not re-created while the user's card exists")
	err := k8s.Get(ctx, client.ObjectKeyFromObject(user), user)
	assert.False(t, apierrors.IsNotFound(err), "the user's card is never touched")
}
