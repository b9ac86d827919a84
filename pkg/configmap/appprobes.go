package configmap

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The agent's own kubelet probes under inbound interception (issue 27). proxy-init redirects every
// inbound port but the excluded ones to the inbound proxy, which refuses a request without a token:
// a kubelet probe on the agent's port would fail. So the injector rewrites such a probe into an
// httpGet on StatusPortAuthbridge at AppProbePath(container, kind), and hands the original to the
// authbridge container as the AppProbesVariable line of the identity defaults
// (IdentityDefaultsAnnotation, projected into IdentityDefaultsFile); kagenti-authbridge runs the
// original against the app on loopback when the kubelet GETs the path. The same line is how the
// injector restores the originals on removal.
const (
	// AppProbesVariable is the identity-defaults line with the original probes: a JSON object,
	// AppProbeKey → AppProbe.
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

// AppProbe is one original probe: its handler exactly as the template had it (restored on
// removal), the timeout the kubelet gave it, and, when the port the app listens on is not the
// handler's number (a named port, or the inbound proxy's port whose traffic goes to the target
// port), that port.
type AppProbe struct {
	corev1.ProbeHandler
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	AppPort        int32 `json:"appPort,omitempty"`
}

// Port is the port of 127.0.0.1 the probe reaches the app on.
func (p AppProbe) Port() int32 {
	if p.AppPort != 0 {
		return p.AppPort
	}
	switch {
	case p.HTTPGet != nil:
		return p.HTTPGet.Port.IntVal
	case p.TCPSocket != nil:
		return p.TCPSocket.Port.IntVal
	case p.GRPC != nil:
		return p.GRPC.Port
	}
	return 0
}

// FormatAppProbes is the AppProbesVariable line (with its newline) for probes, "" for none.
func FormatAppProbes(probes map[string]AppProbe) (string, error) {
	if len(probes) == 0 {
		return "", nil
	}
	b, err := json.Marshal(probes) // keys sorted: the same probes, the same line
	if err != nil {
		return "", fmt.Errorf("encoding %s: %w", AppProbesVariable, err)
	}
	return AppProbesVariable + "=" + string(b) + "\n", nil
}

// ParseAppProbes reads the value of AppProbesVariable; "" is no probes. Every probe must name a
// loopback port and one handler the data plane can run (httpGet without host, tcpSocket, grpc).
func ParseAppProbes(v string) (map[string]AppProbe, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var out map[string]AppProbe
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("%s: %w", AppProbesVariable, err)
	}
	for key, p := range out {
		handlers := 0
		for _, set := range []bool{p.HTTPGet != nil, p.TCPSocket != nil, p.GRPC != nil, p.Exec != nil} {
			if set {
				handlers++
			}
		}
		switch {
		case handlers != 1 || p.Exec != nil:
			return nil, fmt.Errorf("%s: probe %q: exactly one of httpGet, tcpSocket, grpc is needed", AppProbesVariable, key)
		case p.HTTPGet != nil && p.HTTPGet.Host != "":
			return nil, fmt.Errorf("%s: probe %q: httpGet.host is set; only the app on loopback is probed", AppProbesVariable, key)
		case p.Port() < 1 || p.Port() > 65535:
			return nil, fmt.Errorf("%s: probe %q: no port 1-65535 (a named port needs appPort)", AppProbesVariable, key)
		}
	}
	return out, nil
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
