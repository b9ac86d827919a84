package inject_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
)

// addedBytes is what injection adds to the JSON of a one-container pod template.
func addedBytes(t *testing.T, labels, annotations map[string]string) int {
	t.Helper()
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/kagenti/weather-agent:v0.1.0"}}}}
	o, err := inject.ParseOptions("weather-agent", labels, annotations)
	require.NoError(t, err)
	o.ReadTemplate(tmpl)
	r, err := inject.Render(config.Default(), o)
	require.NoError(t, err)
	out, _, err := inject.Inject(tmpl, r)
	require.NoError(t, err)
	before, err := json.Marshal(tmpl)
	require.NoError(t, err)
	after, err := json.Marshal(out)
	require.NoError(t, err)
	return len(after) - len(before)
}

// TestInjectionSize holds the bytes injection adds to a pod template (issue 15: every stored
// Deployment, ReplicaSet and Pod carries them; the API server's create latency follows). The
// budgets are today's sizes, rounded up: a change that grows the injection must say why here.
// (Before the combined authbridge sidecar: 3,891, 4,791 and 3,043 bytes; before the lean
// injection v4: 2,408, 3,308 and 2,307.)
func TestInjectionSize(t *testing.T) {
	for _, tc := range []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		budget      int
	}{
		// +58 each: the trace mount into the authbridge container (its spans go where the
		// workload's AgentTrace points).
		{"default components", nil, nil, 2080},
		{"spiffe", map[string]string{inject.LabelSpiffe: "enabled"}, nil, 3110}, // +49: the SPIRE socket into authbridge (mTLS)
		{"proxies only", nil, map[string]string{inject.AnnotationExcludeComponents: "client-registration"}, 1980},
	} {
		n := addedBytes(t, tc.labels, tc.annotations)
		t.Logf("%s: %d bytes added", tc.name, n)
		require.LessOrEqual(t, n, tc.budget, "%s: the injection grew", tc.name)
	}
}

// TestProbeRewriteSize holds what the probe rewrite adds on top of the injection (issue 27): for the
// common case, an HTTP readiness and liveness probe on the agent's port, the two rewritten paths and
// the KAGENTI_APP_PROBES line with the originals, less the original handlers.
func TestProbeRewriteSize(t *testing.T) {
	probe := func() *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ping", Port: intstr.FromInt32(8081), Scheme: corev1.URISchemeHTTP}}}
	}
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/kagenti/weather-agent:v0.1.0",
		ReadinessProbe: probe(), LivenessProbe: probe()}}}}
	size := func(annotations map[string]string) int {
		o, err := inject.ParseOptions("weather-agent", nil, annotations)
		require.NoError(t, err)
		r, err := inject.Render(config.Default(), o)
		require.NoError(t, err)
		out, _, err := inject.Inject(tmpl, r)
		require.NoError(t, err)
		b, err := json.Marshal(out)
		require.NoError(t, err)
		return len(b)
	}
	n := size(nil) - size(map[string]string{inject.AnnotationRewriteAppProbes: "false"})
	t.Logf("two HTTP probes rewritten: %d bytes added", n)
	require.LessOrEqual(t, n, 210, "the probe rewrite grew")
}
