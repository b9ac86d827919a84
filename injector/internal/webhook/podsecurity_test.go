package webhook_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"

	"github.com/kagenti/platform/injector/internal/inject"
	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
)

// levels is a PodSecurityLevels from a fixed map of namespace → enforce label.
type levels map[string]string

func (l levels) Enforced(ns string) (api.LevelVersion, bool) {
	level, ok := l[ns]
	if !ok {
		return api.LevelVersion{}, false
	}
	return api.LevelVersion{Level: api.Level(level), Version: api.LatestVersion()}, level != string(api.LevelPrivileged)
}

// A namespace that enforces Pod Security baseline admits the workload and refuses its pods (proxy-init
// adds NET_ADMIN): the admission answer warns, naming the namespace, its level and what it forbids,
// and still injects. A namespace whose level allows the injection gets no warning.
func TestHandlerWarnsWhenTheNamespacePodSecurityForbidsTheInjection(t *testing.T) {
	h := newHandler()
	h.PodSecurity = levels{"agents": "baseline", "open": "privileged"}
	hook := injectorwebhook.HTTPHandler(h)

	_, resp := post(t, hook, review(t, admissionv1.Create, deploymentGVK, deployment("agents", 1, 0)))
	require.True(t, resp.Allowed, "the workload is admitted: Pod Security Admission refuses its pods, not it")
	require.NotEmpty(t, resp.Patch, "and injected")
	require.Len(t, resp.Warnings, 1)
	require.Contains(t, resp.Warnings[0], `kagenti-injector: namespace "agents" enforces Pod Security "baseline:latest", which forbids what is injected into Deployment "agent": `+
		`non-default capabilities (container "proxy-init" must not include "NET_ADMIN" in securityContext.capabilities.add)`)
	require.Contains(t, resp.Warnings[0], "Label the namespace pod-security.kubernetes.io/enforce=privileged")

	open := bytes.Replace(review(t, admissionv1.Create, deploymentGVK, deployment("open", 1, 0)), []byte(`"namespace":"agents"`), []byte(`"namespace":"open"`), 1)
	_, resp = post(t, hook, open)
	require.True(t, resp.Allowed)
	require.Empty(t, resp.Warnings, "privileged allows the injection")

	// Nothing that needs privileges injected (no proxies, no spiffe): nothing to warn about.
	d := deployment("agents", 1, 0)
	d.Annotations = map[string]string{inject.AnnotationExcludeComponents: "auth-proxy,envoy-proxy,client-registration"}
	_, resp = post(t, hook, review(t, admissionv1.Create, deploymentGVK, d))
	require.True(t, resp.Allowed)
	require.Empty(t, resp.Warnings)

	// An unchanged re-admission (kubectl apply of the same manifest) warns again.
	injected := deployment("agents", 1, 0)
	_, resp = post(t, hook, review(t, admissionv1.Create, deploymentGVK, injected))
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	require.NoError(t, err)
	stored, err := patch.Apply(mustJSON(t, injected))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(stored, injected))
	_, resp = post(t, hook, review(t, admissionv1.Update, deploymentGVK, injected))
	require.True(t, resp.Allowed)
	require.Empty(t, resp.Patch)
	require.Len(t, resp.Warnings, 1)

	// The user's own violation is the API server's to report, not the injector's.
	priv := deployment("agents", 1, 0)
	priv.Spec.Template.Spec.HostPID = true
	_, resp = post(t, hook, review(t, admissionv1.Create, deploymentGVK, priv))
	require.Len(t, resp.Warnings, 1)
	require.NotContains(t, resp.Warnings[0], "host namespaces")
}

// levelsAndModes adds namespace labels kagenti.io/interception to levels.
type levelsAndModes struct {
	levels
	modes map[string]string
}

func (l levelsAndModes) Interception(ns string) (string, bool) {
	mode, ok := l.modes[ns]
	return mode, ok
}

// TestNamespaceLabelChoosesTheInterceptionMode: a namespace labelled kagenti.io/interception
// chooses the mode of its workloads without a label of their own; the workload's label wins; a
// bad namespace value is refused, naming the namespace; the Pod Security warning names proxy mode.
func TestNamespaceLabelChoosesTheInterceptionMode(t *testing.T) {
	h := newHandler()
	h.PodSecurity = levelsAndModes{levels{"agents": "baseline"}, map[string]string{"agents": "proxy"}}
	hook := injectorwebhook.HTTPHandler(h)
	modeOf := func(resp *admissionv1.AdmissionResponse) string {
		t.Helper()
		require.True(t, resp.Allowed, "%+v", resp.Result)
		for _, op := range decodePatch(t, resp.Patch) {
			if v, ok := op["value"].(map[string]any); ok {
				if st, ok := v[inject.AnnotationStatus].(string); ok {
					var s inject.Status
					require.NoError(t, json.Unmarshal([]byte(st), &s))
					return s.Interception
				}
			}
			if op["path"] == "/spec/template/metadata/annotations/"+strings.ReplaceAll(inject.AnnotationStatus, "/", "~1") {
				var s inject.Status
				require.NoError(t, json.Unmarshal([]byte(op["value"].(string)), &s))
				return s.Interception
			}
		}
		t.Fatalf("no status annotation in the patch")
		return ""
	}
	_, resp := post(t, hook, review(t, admissionv1.Create, deploymentGVK, deployment("agents", 1, 0)))
	require.Equal(t, "proxy", modeOf(resp), "the namespace's mode")
	require.Empty(t, resp.Warnings, "proxy mode: nothing baseline forbids")

	d := deployment("agents", 1, 0)
	d.Labels[inject.LabelInterception] = "transparent"
	_, resp = post(t, hook, review(t, admissionv1.Create, deploymentGVK, d))
	require.Equal(t, "", modeOf(resp), "the workload's label wins (transparent records no mode)")
	require.Len(t, resp.Warnings, 1)
	require.Contains(t, resp.Warnings[0], "label the Deployment kagenti.io/interception=proxy (proxy mode: no capability)")

	h.PodSecurity = levelsAndModes{levels{}, map[string]string{"agents": "Proxy"}}
	_, resp = post(t, injectorwebhook.HTTPHandler(h), review(t, admissionv1.Create, deploymentGVK, deployment("agents", 1, 0)))
	require.False(t, resp.Allowed)
	require.Contains(t, resp.Result.Message, `label kagenti.io/interception of namespace "agents": invalid value "Proxy": accepted values: transparent, proxy (or label the workload itself)`)
}

// TestNamespaceLevelsReadTheInterceptionLabel: the cache's transform keeps the label (and, of the
// others, only Pod Security's), so the watch sees it.
func TestNamespaceLevelsReadTheInterceptionLabel(t *testing.T) {
	trimmed, err := injectorwebhook.TrimNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents",
		Labels: map[string]string{inject.LabelInterception: "proxy", "team": "weather"}}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{inject.LabelInterception: "proxy"}, trimmed.(*corev1.Namespace).Labels)
}
