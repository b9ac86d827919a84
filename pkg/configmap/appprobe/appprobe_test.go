package appprobe

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kagenti/platform/pkg/configmap/contract"
)

// The line the injector writes is the one the sidecar reads back, among the other identity
// defaults, wherever it stands.
func TestAppProbesLineRoundTrips(t *testing.T) {
	probes := map[string]AppProbe{
		"agent/readyz": {ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ping", Port: intstr.FromString("a2a")}}, AppPort: 8081},
		"agent/livez":  {ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8081)}}, TimeoutSeconds: 3},
	}
	line, err := Format(probes)
	if err != nil || !strings.HasPrefix(line, contract.AppProbesVariable+"=") || strings.Count(line, "\n") != 1 {
		t.Fatalf("FormatAppProbes = %q, %v", line, err)
	}
	for _, defaults := range []string{line, "KAGENTI_WORKLOAD=w\n" + line, "KAGENTI_WORKLOAD=w\n" + line + "KAGENTI_REALM=r\n"} {
		rest, value := contract.SplitAppProbes(defaults)
		if strings.Contains(rest, contract.AppProbesVariable) || rest != strings.Replace(defaults, line, "", 1) {
			t.Errorf("%q: rest %q", defaults, rest)
		}
		got, err := Parse(value)
		if err != nil || len(got) != 2 || got["agent/readyz"].Port() != 8081 || got["agent/livez"].TimeoutSeconds != 3 {
			t.Errorf("%q: parsed %v, %v", defaults, got, err)
		}
	}
	if rest, value := contract.SplitAppProbes("X_KAGENTI_APP_PROBES=1\n"); value != "" || rest != "X_KAGENTI_APP_PROBES=1\n" {
		t.Errorf("a longer name is not the line: %q %q", rest, value)
	}
	if line, _ := Format(nil); line != "" {
		t.Errorf("no probes, no line: %q", line)
	}
}

// A probe the data plane cannot run against the app on loopback is refused, naming the variable.
func TestParseAppProbesRefuses(t *testing.T) {
	for name, value := range map[string]string{
		"not JSON":          `{`,
		"exec":              `{"a/livez":{"exec":{"command":["true"]}}}`,
		"no handler":        `{"a/livez":{"timeoutSeconds":1}}`,
		"two handlers":      `{"a/livez":{"tcpSocket":{"port":1},"grpc":{"port":1}}}`,
		"host":              `{"a/livez":{"httpGet":{"host":"10.0.0.1","port":80}}}`,
		"named, no appPort": `{"a/livez":{"httpGet":{"port":"http"}}}`,
		"port out of range": `{"a/livez":{"tcpSocket":{"port":70000}}}`,
	} {
		if _, err := Parse(value); err == nil || !strings.Contains(err.Error(), contract.AppProbesVariable) {
			t.Errorf("%s: %v, want a refusal naming %s", name, err, contract.AppProbesVariable)
		}
	}
}
