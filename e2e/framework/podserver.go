package framework

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// ServeOnPodIP serves h on podIP:port from this process and stops when the test ends. On the local
// cluster pods get loopback IPs (127.1.0.0/24), so a test can answer HTTP for a pod — e.g. serve an
// agent card that agentcard then fetches from the pod's IP exactly as it would in a real cluster.
func ServeOnPodIP(t testing.TB, podIP string, port int, h http.Handler) {
	t.Helper()
	ip := net.ParseIP(podIP)
	if ip == nil || !ip.IsLoopback() {
		t.Skipf("pod IP %q is not a loopback address: this test needs the local cluster's loopback pod CIDR", podIP)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(podIP, strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listening on %s:%d for the pod: %v", podIP, port, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("pod server %s: %v", ln.Addr(), err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
}
