package podsecurity_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/configmap/podsecurity"
)

func TestEnforcedReadsTheLabelsAsPodSecurityAdmission(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		want   string // "" when nothing beyond privileged is enforced
	}{
		{nil, ""},
		{map[string]string{"pod-security.kubernetes.io/warn": "restricted"}, ""},
		{map[string]string{podsecurity.EnforceLabel: "privileged"}, ""},
		{map[string]string{podsecurity.EnforceLabel: "baseline"}, "baseline:latest"},
		{map[string]string{podsecurity.EnforceLabel: "baseline", podsecurity.EnforceVersionLabel: "v1.30"}, "baseline:v1.30"},
		{map[string]string{podsecurity.EnforceLabel: "strict"}, "restricted:latest"}, // invalid: enforced as restricted
	} {
		lv, ok := podsecurity.Enforced(tc.labels)
		require.Equal(t, tc.want != "", ok, "%v", tc.labels)
		if ok {
			require.Equal(t, tc.want, lv.String())
		}
	}
}

// proxyInit is the injected proxy-init's security context (root, NET_ADMIN only).
func proxyInit() corev1.Container {
	return corev1.Container{Name: "proxy-init", Image: "i:1", SecurityContext: &corev1.SecurityContext{
		RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false), AllowPrivilegeEscalation: ptr.To(false),
		Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}}}}
}

// injected is a template with the user's agent and the injected parts in, as a v4 status records them.
func injected(volumes ...corev1.Volume) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{contract.InjectionStatusAnnotation: `{"version":"v4","hash":"0"}`}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{proxyInit()},
			Containers: []corev1.Container{{Name: "agent", Image: "a:1",
				// The user's own violation is not the injection's.
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}},
			Volumes: volumes,
		}}
}

func TestForbiddenNamesWhatTheLevelForbidsInTheInjectedParts(t *testing.T) {
	netAdmin := `non-default capabilities (container "proxy-init" must not include "NET_ADMIN" in securityContext.capabilities.add)`
	baseline := api.LevelVersion{Level: api.LevelBaseline, Version: api.LatestVersion()}
	require.Equal(t, []string{netAdmin}, podsecurity.Forbidden(baseline, injected()))

	restricted := podsecurity.Forbidden(api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}, injected())
	require.Contains(t, restricted, `runAsNonRoot != true (container "proxy-init" must not set securityContext.runAsNonRoot=false)`)
	require.Contains(t, restricted, `runAsUser=0 (container "proxy-init" must not set runAsUser=0)`)

	require.Nil(t, podsecurity.Forbidden(api.LevelVersion{Level: api.LevelPrivileged, Version: api.LatestVersion()}, injected()))
	none := injected()
	none.Annotations = nil
	require.Empty(t, podsecurity.Forbidden(baseline, none), "no status, nothing injected: the user's own proxy-init is the user's")
	kept := injected()
	kept.Annotations[contract.InjectionStatusAnnotation] = `{"version":"v4","hash":"0","kept":["proxy-init"]}`
	require.Empty(t, podsecurity.Forbidden(baseline, kept), "a kept proxy-init is the user's")

	// A hostPath volume (the SPIRE socket from the node) is the injection's too.
	hostPath := injected(corev1.Volume{Name: contract.VolumeSpireSocket, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/spire"}}})
	require.Equal(t, []string{netAdmin, `hostPath volumes (volume "spire-agent-socket")`}, podsecurity.Forbidden(baseline, hostPath))

	// The template's own pod-level violation is left to Pod Security Admission's own message.
	hostPID := injected()
	hostPID.Spec.HostPID = true
	require.Equal(t, []string{netAdmin}, podsecurity.Forbidden(baseline, hostPID))
}

// The cost the injector's warning adds to an admission in a namespace that enforces a level.
func BenchmarkForbidden(b *testing.B) {
	tmpl := injected()
	for _, level := range []api.Level{api.LevelBaseline, api.LevelRestricted} {
		lv := api.LevelVersion{Level: level, Version: api.LatestVersion()}
		b.Run(string(level), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				podsecurity.Forbidden(lv, tmpl)
			}
		})
	}
}
