package podrunner

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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
// (HTTP, or HTTPS without verifying the certificate), tcpSocket and grpc (grpc.health.v1) probes
// against the pod IP, or the probe's own host, as the kubelet does from the node. exec probes would
// need to enter the container's namespaces: refused.
func checkProbe(c *corev1.Container, field string, p *corev1.Probe) error {
	if p == nil {
		return nil
	}
	switch {
	case p.Exec != nil:
		return fmt.Errorf("container %s: %s: exec probes are not supported (httpGet, tcpSocket and grpc are)", c.Name, field)
	case p.HTTPGet == nil && p.TCPSocket == nil && p.GRPC == nil:
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
	host := ip.String()
	switch {
	case spec.HTTPGet != nil && spec.HTTPGet.Host != "":
		host = spec.HTTPGet.Host
	case spec.TCPSocket != nil && spec.TCPSocket.Host != "":
		host = spec.TCPSocket.Host
	}
	return &probe{container: c.Name, kind: kind, spec: spec, addr: net.JoinHostPort(host, strconv.Itoa(port))}
}

// probePort resolves the probe's port, by number or by the name of one of the container's ports.
func probePort(c *corev1.Container, p *corev1.Probe) (int, error) {
	var port intstr.IntOrString
	switch {
	case p.HTTPGet != nil:
		port = p.HTTPGet.Port
	case p.TCPSocket != nil:
		port = p.TCPSocket.Port
	default:
		port = intstr.FromInt32(p.GRPC.Port)
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

// once performs the probe a single time: nil is success (HTTP 200–399, a TCP connection, or a
// gRPC health check answering SERVING).
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
	if p.spec.GRPC != nil {
		return grpcHealthCheck(ctx, p.addr, p.spec.GRPC.Service)
	}
	scheme := "http://"
	if p.spec.HTTPGet.Scheme == corev1.URISchemeHTTPS {
		scheme = "https://"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+p.addr+p.spec.HTTPGet.Path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "kube-probe/podrunner")
	for _, h := range p.spec.HTTPGet.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
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

// probeClient does not keep connections (the kubelet's probes open one per attempt), verifies no
// certificate and follows no redirect (a redirect is a success to the kubelet).
var probeClient = &http.Client{
	Transport:     &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // as the kubelet
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// grpcHealthCheck is the kubelet's gRPC probe: grpc.health.v1.Health/Check without TLS, SERVING
// passes.
func grpcHealthCheck(ctx context.Context, addr string, service *string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	req := &healthpb.HealthCheckRequest{}
	if service != nil {
		req.Service = *service
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, req)
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("gRPC health: %s", resp.GetStatus())
	}
	return nil
}

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

// watch runs a liveness or readiness probe after its initial delay and then every period until
// stop closes, passing each result to report and counting consecutive failures; the returned
// function reports the longest run and its last error.
func (p *probe) watch(stop <-chan struct{}, report func(error)) func() (int, error) {
	var mu sync.Mutex
	var run, worst int
	var worstErr error
	go func() {
		wait := time.Duration(p.spec.InitialDelaySeconds) * time.Second
		for {
			select {
			case <-stop:
				return
			case <-time.After(wait):
			}
			wait = p.period()
			err := p.once(context.Background())
			report(err)
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

// superviseProbes runs a container's probes, the stand-in agent's as every other's: a startup probe
// blocks until it succeeds (for a native sidecar the kubelet starts the next container only then;
// for another container the wait only delays the runner's return), and only then do liveness and
// readiness run, as the kubelet holds them back until startup passed. Liveness failing
// failureThreshold times in a row fails the test (the kubelet would have restarted the container:
// a test that expects a running pod would not notice a restart otherwise); readiness decides the
// container's Ready (RunningPod.Ready), as it decides the kubelet's Ready condition. A container
// without a readiness probe is ready once started (and past its startup probe).
func (r *podRun) superviseProbes(t testing.TB, c *corev1.Container, p *process) {
	t.Helper()
	ip := r.net.IP
	if c.StartupProbe != nil {
		newProbe(c, "startup", c.StartupProbe, ip).awaitStartup(t, p.done)
	}
	r.running.setReady(c.Name, c.ReadinessProbe == nil)
	for _, watched := range []struct {
		kind string
		spec *corev1.Probe
	}{{"liveness", c.LivenessProbe}, {"readiness", c.ReadinessProbe}} {
		if watched.spec == nil {
			continue
		}
		pr := newProbe(c, watched.kind, watched.spec, ip)
		report := func(error) {}
		if pr.kind == "readiness" {
			report = func(err error) { r.running.setReady(c.Name, err == nil) }
		}
		stop := make(chan struct{})
		worst := pr.watch(stop, report)
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
