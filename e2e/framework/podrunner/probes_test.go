package podrunner

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The probes a kubelet runs over the network are accepted and run as it runs them: gRPC health
// checks, HTTPS without verification, a probe's own host and Host header; only exec is refused.
func TestProbesAsAKubelet(t *testing.T) {
	c := &corev1.Container{Name: "agent"}
	for field, p := range map[string]*corev1.Probe{
		"grpc":  {ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9000}}},
		"https": {ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8443), Scheme: corev1.URISchemeHTTPS}}},
		"host":  {ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80), Host: "127.0.0.1"}}},
	} {
		if err := checkProbe(c, "readinessProbe", p); err != nil {
			t.Errorf("%s: refused: %v", field, err)
		}
	}
	if err := checkProbe(c, "livenessProbe", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{}}}); err == nil || !strings.Contains(err.Error(), "exec") {
		t.Errorf("exec: %v, want a refusal naming it", err)
	}

	var host string
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { host = r.Host }))
	defer tlsSrv.Close()
	ap := netip.MustParseAddrPort(strings.TrimPrefix(tlsSrv.URL, "https://"))
	https := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(ap.Port())),
		Scheme: corev1.URISchemeHTTPS, HTTPHeaders: []corev1.HTTPHeader{{Name: "Host", Value: "agent.local"}}}}}
	if err := newProbe(c, "readiness", https, ap.Addr()).once(context.Background()); err != nil || host != "agent.local" {
		t.Errorf("HTTPS probe with a self-signed certificate: %v (Host %q)", err, host)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	gp := netip.MustParseAddrPort(ln.Addr().String())
	grpcProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: int32(gp.Port()), Service: ptr.To("weather")}}}
	hs.SetServingStatus("weather", healthpb.HealthCheckResponse_SERVING)
	if err := newProbe(c, "startup", grpcProbe, gp.Addr()).once(context.Background()); err != nil {
		t.Errorf("gRPC SERVING: %v", err)
	}
	hs.SetServingStatus("weather", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := newProbe(c, "startup", grpcProbe, gp.Addr()).once(context.Background()); err == nil {
		t.Error("gRPC NOT_SERVING must fail")
	}
}

// Readiness decides Ready: every running container ready, a failed readiness probe takes the pod
// out, a container without a readiness probe counts as ready once started.
func TestReadinessDecidesReady(t *testing.T) {
	p := &RunningPod{Pod: &corev1.Pod{}, containers: map[string]*process{"agent": {}, "helper": {}}}
	if ready, _ := p.Ready(); ready {
		t.Fatal("ready before any probe ran")
	}
	p.setReady("helper", true)
	p.setReady("agent", true)
	if ready, not := p.Ready(); !ready {
		t.Fatalf("not ready: %v", not)
	}
	p.setReady("agent", false)
	if ready, not := p.Ready(); ready || len(not) != 1 || not[0] != "agent" {
		t.Fatalf("Ready = %v %v, want false naming agent", ready, not)
	}
}

// watch runs the probe at once (no initial delay) and reports each result.
func TestWatchReportsEachResult(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer srv.Close()
	ap := netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
	spec := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(ap.Port()))}}}
	results := make(chan error, 1)
	stop := make(chan struct{})
	worst := newProbe(&corev1.Container{Name: "agent"}, "readiness", spec, ap.Addr()).watch(stop, func(err error) {
		select {
		case results <- err:
		default:
		}
	})
	err := <-results
	close(stop)
	var dummy *net.OpError
	if err == nil || errors.As(err, &dummy) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("first result %v, want the app's 503", err)
	}
	if n, _ := worst(); n < 1 {
		t.Fatalf("failures counted %d", n)
	}
}
