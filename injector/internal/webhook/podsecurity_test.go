package webhook_test

import (
	"bytes"
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
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
