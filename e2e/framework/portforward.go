package framework

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// forwarding is the line kubectl port-forward prints once it listens.
var forwarding = regexp.MustCompile(`^Forwarding from 127\.0\.0\.1:(\d+) -> \d+`)

// PortForward forwards a free local port to port of the pod ns/name (bin/kubectl port-forward,
// through the API server and the pod's kubelet) until the test ends, and returns its address. The
// connection is made inside the pod's network namespace to localhost:port, as the kubelet does.
func PortForward(t testing.TB, ns, pod string, port int) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(Root(), "bin", "kubectl"), "--kubeconfig", KubeconfigPath(),
		"-n", ns, "port-forward", "--address", "127.0.0.1", "pod/"+pod, ":"+strconv.Itoa(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("kubectl port-forward: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if m := forwarding.FindStringSubmatch(s.Text()); m != nil {
				addr <- "127.0.0.1:" + m[1]
			}
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("kubectl port-forward to %s/%s:%d exited: %s", ns, pod, port, stderr.String())
		}
		return a
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl port-forward to %s/%s:%d printed no address in 30 s: %s", ns, pod, port, stderr.String())
	}
	return ""
}
