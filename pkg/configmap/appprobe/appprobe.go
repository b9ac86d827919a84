// Package appprobe reads and writes the value of the identity-defaults line
// contract.AppProbesVariable: the agent's original kubelet probes, which the injector rewrites to
// the authbridge container's status port and kagenti-authbridge runs against the app on loopback.
// The probes are kept in the kubelet's own types (k8s.io/api/core/v1), so the injector restores
// them exactly and the sidecar runs what the kubelet would; this package imports nothing else of
// Kubernetes, so the sidecar links no controller library through it.
package appprobe

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kagenti/platform/pkg/configmap/contract"
)

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

// Format is the contract.AppProbesVariable line (with its newline) for probes, "" for none.
func Format(probes map[string]AppProbe) (string, error) {
	if len(probes) == 0 {
		return "", nil
	}
	b, err := json.Marshal(probes) // keys sorted: the same probes, the same line
	if err != nil {
		return "", fmt.Errorf("encoding %s: %w", contract.AppProbesVariable, err)
	}
	return contract.AppProbesVariable + "=" + string(b) + "\n", nil
}

// Parse reads the value of contract.AppProbesVariable; "" is no probes. Every probe must name a
// loopback port and one handler the data plane can run (httpGet without host, tcpSocket, grpc).
func Parse(v string) (map[string]AppProbe, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var out map[string]AppProbe
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("%s: %w", contract.AppProbesVariable, err)
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
			return nil, fmt.Errorf("%s: probe %q: exactly one of httpGet, tcpSocket, grpc is needed", contract.AppProbesVariable, key)
		case p.HTTPGet != nil && p.HTTPGet.Host != "":
			return nil, fmt.Errorf("%s: probe %q: httpGet.host is set; only the app on loopback is probed", contract.AppProbesVariable, key)
		case p.Port() < 1 || p.Port() > 65535:
			return nil, fmt.Errorf("%s: probe %q: no port 1-65535 (a named port needs appPort)", contract.AppProbesVariable, key)
		}
	}
	return out, nil
}
