package contract

import "strings"

// The agent's own kubelet probes under inbound interception (issue 27). proxy-init redirects every
// inbound port but the excluded ones to the inbound proxy, which refuses a request without a token:
// a kubelet probe on the agent's port would fail. So the injector rewrites such a probe into an
// httpGet on StatusPortAuthbridge at AppProbePath(container, kind), and hands the original to the
// authbridge container as the AppProbesVariable line of the identity defaults
// (IdentityDefaultsAnnotation, projected into IdentityDefaultsFile); kagenti-authbridge runs the
// original against the app on loopback when the kubelet GETs the path. The same line is how the
// injector restores the originals on removal. The line's value is read and written by package
// pkg/configmap/appprobe, in the kubelet's own probe types.
const (
	// AppProbesVariable is the identity-defaults line with the original probes: a JSON object,
	// AppProbeKey → appprobe.AppProbe.
	AppProbesVariable = "KAGENTI_APP_PROBES"
	// AppProbePathPrefix starts every rewritten probe's path.
	AppProbePathPrefix = "/app-health/"
)

// Kinds of probe, as the last segment of a rewritten probe's path.
const (
	ProbeLiveness  = "livez"
	ProbeReadiness = "readyz"
	ProbeStartup   = "startupz"
)

// AppProbeKey is the key of a container's probe of kind in the AppProbesVariable object: the part
// of its rewritten path after AppProbePathPrefix.
func AppProbeKey(container, kind string) string { return container + "/" + kind }

// AppProbePath is the path the rewritten probe of container's kind GETs.
func AppProbePath(container, kind string) string {
	return AppProbePathPrefix + AppProbeKey(container, kind)
}

// SplitAppProbes separates the AppProbesVariable line from identity defaults (the annotation's
// value): the other lines, and the line's value ("" when there is none).
func SplitAppProbes(defaults string) (rest, probes string) {
	prefix := AppProbesVariable + "="
	if i := strings.Index(defaults, prefix); i == 0 || (i > 0 && defaults[i-1] == '\n') {
		line, after, _ := strings.Cut(defaults[i:], "\n")
		return defaults[:i] + after, strings.TrimPrefix(line, prefix)
	}
	return defaults, ""
}
