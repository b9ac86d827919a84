package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// TestPodEventEnqueuesItsTokenExchange: a pod event wakes exactly the TokenExchange that owns the
// ConfigMap the pod's token-exchange volume mounts; not the TokenExchanges of other workloads
// whose selectors match the pod too, nor those of the same workload name in another namespace. A
// pod that mounts no token-exchange volume, or a ConfigMap no TokenExchange owns (not written yet,
// or someone else's), wakes none.
func TestPodEventEnqueuesItsTokenExchange(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	require.NoError(t, corev1.AddToScheme(scheme))
	owned := func(ns, name string, owner *metav1.OwnerReference) client.Object {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if owner != nil {
			cm.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		return cm
	}
	te := func(name string) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TokenExchange", Name: name, UID: "u-" + types.UID(name), Controller: new(true)}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(
			owned("team", "web-token-exchange", te("web")),
			// Another workload of the namespace whose selector (app=web) matches the same pods.
			owned("team", "web-canary-token-exchange", te("web-canary")),
			owned("other", "web-token-exchange", te("web-other")),
			owned("team", "theirs-token-exchange", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "theirs", UID: "d", Controller: new(true)}),
			owned("team", "loose-token-exchange", nil),
		).Build()
	r := &Reconciler{Client: c}

	pod := func(volume, cm string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web-1", Labels: map[string]string{"app": "web"}}}
		if volume != "" {
			p.Spec.Volumes = []corev1.Volume{{Name: volume,
				VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}}
		}
		return p
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []reconcile.Request
	}{
		{"mounts web's ConfigMap", pod(contract.VolumeTokenExchange, "web-token-exchange"),
			[]reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "team", Name: "web"}}}},
		{"mounts the canary's ConfigMap", pod(contract.VolumeTokenExchange, "web-canary-token-exchange"),
			[]reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "team", Name: "web-canary"}}}},
		{"mounts a ConfigMap not written yet", pod(contract.VolumeTokenExchange, "gone-token-exchange"), nil},
		{"mounts a ConfigMap a Deployment controls", pod(contract.VolumeTokenExchange, "theirs-token-exchange"), nil},
		{"mounts a ConfigMap without owner", pod(contract.VolumeTokenExchange, "loose-token-exchange"), nil},
		{"the ConfigMap under another volume name", pod("config", "web-token-exchange"), nil},
		{"not injected", pod("", ""), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ElementsMatch(t, tt.want, r.podReferrers(context.Background(), newCachedPod(tt.pod)))
		})
	}
}
