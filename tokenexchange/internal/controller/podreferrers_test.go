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

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// TestPodEventEnqueuesItsTokenExchange: a pod event wakes exactly the TokenExchange whose ConfigMap
// the pod's token-exchange volume mounts; not the TokenExchanges of other workloads whose
// selectors match the pod too, nor those of the same workload name in another namespace. A pod
// that mounts no token-exchange volume wakes none.
func TestPodEventEnqueuesItsTokenExchange(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	require.NoError(t, corev1.AddToScheme(scheme))
	te := func(ns, name, kind, target string) client.Object {
		return &v1alpha1.TokenExchange{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.TokenExchangeSpec{TargetRef: duck.TargetRef{Kind: kind, Name: target}}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&v1alpha1.TokenExchange{}, tokenExchangeConfigMapIndex, tokenExchangeConfigMap).
		WithObjects(
			te("team", "web", "Deployment", "web"),
			// Another workload of the namespace whose selector (app=web) matches the same pods.
			te("team", "web-canary", "Deployment", "web-canary"),
			te("team", "api", "StatefulSet", "api"),
			te("other", "web", "Deployment", "web"),
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
		{"mounts web's ConfigMap", pod(configmap.VolumeTokenExchange, "web-token-exchange"),
			[]reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "team", Name: "web"}}}},
		{"mounts the canary's ConfigMap", pod(configmap.VolumeTokenExchange, "web-canary-token-exchange"),
			[]reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "team", Name: "web-canary"}}}},
		{"mounts a ConfigMap no TokenExchange renders", pod(configmap.VolumeTokenExchange, "gone-token-exchange"), nil},
		{"the ConfigMap under another volume name", pod("config", "web-token-exchange"), nil},
		{"not injected", pod("", ""), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ElementsMatch(t, tt.want, r.podReferrers(context.Background(), newCachedPod(tt.pod)))
		})
	}
}
