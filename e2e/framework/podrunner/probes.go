package podrunner

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The probe defaults of the Kubernetes API (the API server fills them in; a pod read back from the
// API has them set, an object built in a test may not).
const (
	defaultProbePeriod           = 10 * time.Second
	defaultProbeTimeout          = time.Second
	defaultProbeFailureThreshold = 3
)

// checkProbe refuses a probe the runner cannot perform as the kubelet would: it performs httpGet
// and tcpSocket probes against the pod IP, as the kubelet does from the node.
func checkProbe(c *corev1.Container, field string, p *corev1.Probe) error {
	if p == nil {
		return nil
	}
	switch {
	case p.Exec != nil || p.GRPC != nil:
		return fmt.Errorf("container %s: %s: only httpGet and tcpSocket probes are supported", c.Name, field)
	case p.HTTPGet != nil && p.HTTPGet.Scheme == corev1.URISchemeHTTPS:
		return fmt.Errorf("container %s: %s: httpGet over HTTPS is not supported", c.Name, field)
	case p.HTTPGet != nil && p.HTTPGet.Host != "":
		return fmt.Errorf("container %s: %s: httpGet.host is not supported (the probe goes to the pod IP)", c.Name, field)
	case p.HTTPGet == nil && p.TCPSocket == nil:
		return fmt.Errorf("container %s: %s: no handler", c.Name, field)
	}
	if _, err := probePort(c, p); err != nil {
		return fmt.Errorf("container %s: %s: %w", c.Name, field, err)
	}
	return nil
}

// probe is one probe of one container, ready to run against the pod IP.
type probe struct {
	container, kind string
	spec            *corev1.Probe
	addr            string // pod IP:port
}

func newProbe(c *corev1.Container, kind string, spec *corev1.Probe, ip netip.Addr) *probe {
	port, _ := probePort(c, spec) // checked by checkPod
	return &probe{container: c.Name, kind: kind, spec: spec, addr: net.JoinHostPort(ip.String(), strconv.Itoa(port))}
}

// probePort resolves the probe's port, by number or by the name of one of the container's ports.
func probePort(c *corev1.Container, p *corev1.Probe) (int, error) {
	var port intstr.IntOrString
	if p.HTTPGet != nil {
		port = p.HTTPGet.Port
	} else {
		port = p.TCPSocket.Port
	}
	if port.Type == intstr.Int {
		if port.IntValue() <= 0 || port.IntValue() > 65535 {
			return 0, fmt.Errorf("port %d is out of range", port.IntValue())
		}
		return port.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("port %q names none of the container's ports", port.StrVal)
}

func (p *probe) period() time.Duration {
	if p.spec.PeriodSeconds > 0 {
		return time.Duration(p.spec.PeriodSeconds) * time.Second
	}
	return defaultProbePeriod
}

func (p *probe) failureThreshold() int {
	if p.spec.FailureThreshold > 0 {
		return int(p.spec.FailureThreshold)
	}
	return defaultProbeFailureThreshold
}

// once performs the probe a single time: nil is success (HTTP 200–399, or a TCP connection).
func (p *probe) once(ctx context.Context) error {
	timeout := defaultProbeTimeout
	if p.spec.TimeoutSeconds > 0 {
		timeout = time.Duration(p.spec.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if p.spec.TCPSocket != nil {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", p.addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+p.spec.HTTPGet.Path, nil)
	if err != nil {
		return err
	}
	for _, h := range p.spec.HTTPGet.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// probeClient does not keep connections: the kubelet's probes open one per attempt.
var probeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// awaitStartup runs a startup probe until it succeeds, as the kubelet does before it starts the
// next init container after a native sidecar. Where the kubelet would restart the container after
// failureThreshold failures, the runner fails the test (it restarts nothing).
func (p *probe) awaitStartup(t testing.TB, exited <-chan struct{}) {
	t.Helper()
	if p.spec.InitialDelaySeconds > 0 {
		time.Sleep(time.Duration(p.spec.InitialDelaySeconds) * time.Second)
	}
	var err error
	for attempt := 1; ; attempt++ {
		if err = p.once(context.Background()); err == nil {
			return
		}
		if attempt >= p.failureThreshold() {
			break
		}
		select {
		case <-exited:
			t.Fatalf("container %s exited before its startup probe succeeded (last: %v)", p.container, err)
		case <-time.After(p.period()):
		}
	}
	t.Fatalf("container %s: startup probe %s failed %d times (the kubelet would restart it): %v", p.container, p.addr, p.failureThreshold(), err)
}

// watch runs a liveness or readiness probe every period until stop closes, counting consecutive
// failures; the returned function reports the longest run and its last error.
func (p *probe) watch(stop <-chan struct{}) func() (int, error) {
	var mu sync.Mutex
	var run, worst int
	var worstErr error
	go func() {
		tick := time.NewTicker(p.period())
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			err := p.once(context.Background())
			mu.Lock()
			if err == nil {
				run = 0
			} else if run++; run > worst {
				worst, worstErr = run, err
			}
			mu.Unlock()
		}
	}()
	return func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return worst, worstErr
	}
}

// superviseProbes starts a container's probes: a startup probe blocks until it succeeds (for a
// native sidecar the kubelet starts the next container only then; for another container the wait
// only delays the runner's return); liveness probes fail the test when they fail failureThreshold
// times in a row while the pod runs (the kubelet would have restarted the container), readiness
// failures are logged. The test's stand-in for an agent is not probed: the agent's probes are
// about the real agent, whose ports the stand-in need not serve.
func (r *podRun) superviseProbes(t testing.TB, c *corev1.Container, p *process) {
	t.Helper()
	if _, program := r.k.Programs[imageName(c.Image)]; !program {
		if c.StartupProbe != nil || c.LivenessProbe != nil || c.ReadinessProbe != nil {
			t.Logf("pod %s container %s: the stand-in agent is not probed", r.pod.Name, c.Name)
		}
		return
	}
	ip := r.net.IP
	if c.StartupProbe != nil {
		newProbe(c, "startup", c.StartupProbe, ip).awaitStartup(t, p.done)
	}
	for _, watched := range []struct {
		kind string
		spec *corev1.Probe
	}{{"liveness", c.LivenessProbe}, {"readiness", c.ReadinessProbe}} {
		if watched.spec == nil {
			continue
		}
		pr := newProbe(c, watched.kind, watched.spec, ip)
		stop := make(chan struct{})
		worst := pr.watch(stop)
		t.Cleanup(func() {
			close(stop)
			n, err := worst()
			switch {
			case n >= pr.failureThreshold() && pr.kind == "liveness":
				t.Errorf("pod %s container %s: liveness probe failed %d times in a row (the kubelet would have restarted it): %v", r.pod.Name, pr.container, n, err)
			case n > 0:
				t.Logf("pod %s container %s: %s probe failed %d times in a row at most: %v", r.pod.Name, pr.container, pr.kind, n, err)
			}
		})
	}
}
