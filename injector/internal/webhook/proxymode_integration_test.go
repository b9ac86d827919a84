package webhook_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
)

// TestProxyModePassesPodSecurityRestricted: on the real API server, in a namespace that enforces
// Pod Security "restricted" (what OpenShift's restricted SCC and GKE Autopilot allow, roughly), a
// Deployment labelled kagenti.io/interception: proxy is injected through the webhook, and a pod of
// its injected template is admitted by the API server's own Pod Security admission (server-side
// dry run); the same workload in transparent mode is refused there, for proxy-init's NET_ADMIN and
// root. The user's template is one restricted admits on its own (non-root, seccomp RuntimeDefault).
func TestProxyModePassesPodSecurityRestricted(t *testing.T) {
	s := startSuite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := s.namespace(t, "psa-restricted", map[string]string{"kagenti.io/injection": "enabled", "pod-security.kubernetes.io/enforce": "restricted"})
	require.NoError(t, s.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}))
	restrictedTemplate := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/kagenti/weather-agent:v0.1.0", SecurityContext: &corev1.SecurityContext{
				RunAsUser: ptr.To[int64](1000), AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
	admit := func(name string, labels map[string]string) (*appsv1.Deployment, error) {
		d := &appsv1.Deployment{ObjectMeta: meta(ns, name, labels, nil), Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: restrictedTemplate.Labels}, Template: *restrictedTemplate.DeepCopy()}}
		require.NoError(t, s.c.Create(ctx, d), "the Deployment is admitted (Pod Security only warns on workloads)")
		require.Contains(t, d.Spec.Template.Annotations, inject.AnnotationStatus, "and injected")
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-pod"}, Spec: d.Spec.Template.Spec}
		return d, s.c.Create(ctx, pod, client.DryRunAll)
	}

	d, err := admit("weather-proxy", map[string]string{inject.LabelInject: inject.InjectEnabled, inject.LabelInterception: config.InterceptionProxy})
	require.NoError(t, err, "a proxy-mode pod passes Pod Security restricted")
	st, err := inject.ReadStatus(&d.Spec.Template)
	require.NoError(t, err)
	require.Equal(t, config.InterceptionProxy, st.Interception)
	require.Equal(t, inject.PortNameInbound, st.ServiceTargetPort)

	_, err = admit("weather-transparent", labelled)
	require.True(t, apierrors.IsForbidden(err), "%v", err)
	require.Contains(t, err.Error(), `violates PodSecurity "restricted:latest"`)
	require.Contains(t, err.Error(), `container "proxy-init" must not include "NET_ADMIN"`)
}
