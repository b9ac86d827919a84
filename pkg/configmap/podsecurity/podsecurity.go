// Package podsecurity says whether a namespace's Pod Security Admission level forbids what the
// injector adds to a pod template (proxy-init's NET_ADMIN and root user above all), with Kubernetes'
// own checks (k8s.io/pod-security-admission/policy), so that the injector warns at admission and
// `kagenti check` reports it with the API server's words, for the level and version it enforces.
package podsecurity

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/kagenti/platform/pkg/configmap"
)

// EnforceLabel and EnforceVersionLabel are the namespace labels Pod Security Admission enforces.
const (
	EnforceLabel        = api.EnforceLevelLabel
	EnforceVersionLabel = api.EnforceVersionLabel
)

// evaluator holds Kubernetes' checks for every level and version (built once: they do not change).
var evaluator = func() policy.Evaluator {
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		panic(fmt.Sprintf("pod-security-admission's default checks: %v", err)) // fixed at build time
	}
	return e
}()

// Enforced returns the level a namespace with these labels enforces, and false when it enforces
// none beyond privileged. It reads the labels as Pod Security Admission does: an invalid level is
// enforced as restricted, a missing or invalid version as latest. A cluster-wide default set in the
// API server's AdmissionConfiguration cannot be seen from the labels; it is taken as privileged, the
// API server's own default.
func Enforced(labels map[string]string) (api.LevelVersion, bool) {
	p, _ := api.PolicyToEvaluate(labels, api.Policy{Enforce: api.LevelVersion{Level: api.LevelPrivileged, Version: api.LatestVersion()}})
	return p.Enforce, p.Enforce.Level != api.LevelPrivileged
}

// Forbidden returns what lv forbids in the parts the injector added to template t (its status
// annotation says which: configmap.InjectedParts), one entry per failed check,
// as the API server words it ("non-default capabilities (container \"proxy-init\" must not include
// \"NET_ADMIN\" in securityContext.capabilities.add)"); nil when it allows them. The pod checked is
// t's pod-level fields (security context, host namespaces…) with only the injected containers and
// volumes; a check that fails for t's pod-level fields alone is the template's own, not reported.
func Forbidden(lv api.LevelVersion, t *corev1.PodTemplateSpec) []string {
	if lv.Level == api.LevelPrivileged {
		return nil
	}
	in := configmap.InjectedParts(t)
	base := t.Spec
	base.InitContainers, base.Containers, base.EphemeralContainers, base.Volumes = nil, nil, nil, nil
	own := map[string]bool{}
	for _, r := range evaluator.EvaluatePod(lv, &t.ObjectMeta, &base) {
		if !r.Allowed {
			own[r.ForbiddenReason] = true
		}
	}
	pod := base
	pod.InitContainers, pod.Containers, pod.Volumes = in.InitContainers, in.Containers, in.Volumes
	var out []string
	for _, r := range evaluator.EvaluatePod(lv, &t.ObjectMeta, &pod) {
		if r.Allowed || own[r.ForbiddenReason] {
			continue
		}
		if r.ForbiddenDetail != "" {
			out = append(out, r.ForbiddenReason+" ("+r.ForbiddenDetail+")")
		} else {
			out = append(out, r.ForbiddenReason)
		}
	}
	return out
}
