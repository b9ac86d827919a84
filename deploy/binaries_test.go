package deploy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestBinariesRunWithShippedRBAC installs the kustomize overlay "all", then runs each of the six
// binaries as its own ServiceAccount (a client certificate for the same user and groups) with its
// default secure metrics endpoint. Each must start its controllers with the shipped rights only (no
// request forbidden) and serve /metrics over HTTPS to a token bound to kagenti-metrics-reader,
// refusing an anonymous scrape (401) and a token without the role (403).
func TestBinariesRunWithShippedRBAC(t *testing.T) {
	bins := buildBinaries(t)
	env, cfg, c := startEnv(t)
	install(t, c, render(t, tool(t, "kubectl"), "kustomize", filepath.Join(repoRoot(), "deploy", "kustomize", "overlays", "all")))
	namespaces(t, c, monitoringNS)
	bind(t, c, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-kagenti-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kagenti-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: monitoringNS, Name: "prometheus"}},
	})
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	reader, intruder := token(t, cs, monitoringNS, "prometheus"), token(t, cs, monitoringNS, "intruder")
	// The injector's webhook needs a serving certificate; its rotator is tested in injector/internal/webhook.
	injectorCerts := t.TempDir()
	out, err := exec.Command(bins["injector"], "gen-certs", "--out-dir", injectorCerts).CombinedOutput()
	require.NoError(t, err, "%s", out)
	extra := map[string][]string{
		"injector":  {"--cert-dir", injectorCerts, "--webhook-host", "127.0.0.1", "--webhook-port", fmt.Sprint(freePort(t)), "--config", ""},
		"agentcard": {"--discovery-bind-address", "0"},
	}

	for _, p := range pillars {
		t.Run(p, func(t *testing.T) {
			user, groups := serviceAccountUser("kagenti-system", "kagenti-"+p)
			kubeconfig := kubeconfigFor(t, env, user, groups)
			metrics, health := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
			args := append([]string{"--kubeconfig", kubeconfig, "--metrics-bind-address", metrics, "--health-probe-bind-address", health}, extra[p]...)
			log := start(t, bins[p], args...)

			waitFor(t, log, "/readyz", func() bool { return get(t, "http://"+health+"/readyz", "") == http.StatusOK })
			// The metrics server listens once it has made its self-signed certificate, after /readyz.
			waitFor(t, log, "the metrics server", func() bool { return get(t, "https://"+metrics+"/metrics", "") != 0 })
			if p != "injector" { // controllers start their workers once their caches synced
				waitFor(t, log, "controllers started", func() bool { return strings.Contains(log.String(), "Starting workers") })
			}
			assert.Equal(t, http.StatusUnauthorized, get(t, "https://"+metrics+"/metrics", ""), "anonymous scrape")
			assert.Equal(t, http.StatusForbidden, get(t, "https://"+metrics+"/metrics", intruder), "scrape without kagenti-metrics-reader")
			assert.Equal(t, http.StatusOK, get(t, "https://"+metrics+"/metrics", reader), "scrape with kagenti-metrics-reader")
			assert.Equal(t, http.StatusBadRequest, get(t, "http://"+metrics+"/metrics", ""), "plain HTTP is not served")
			assert.NotContains(t, log.String(), "forbidden", "the binary needed a right the shipped RBAC does not grant")
			if t.Failed() {
				t.Logf("log of kagenti-%s:\n%s", p, log.String())
			}
		})
	}
}

// buildBinaries builds the six binaries in one go command.
func buildBinaries(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	bins := map[string]string{}
	for _, p := range pillars {
		args = append(args, "./"+p+"/cmd/kagenti-"+p)
		bins[p] = filepath.Join(dir, "kagenti-"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bins
}

// kubeconfigFor writes a kubeconfig authenticating as user (a client certificate from envtest).
func kubeconfigFor(t *testing.T, env *envtest.Environment, user string, groups []string) string {
	t.Helper()
	u, err := env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	require.NoError(t, err)
	b, err := u.KubeConfig()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

// token returns a bound token of a new ServiceAccount ns/name.
func token(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// syncBuffer is a process's combined output, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// start runs a binary until the test ends.
func start(t *testing.T, bin string, args ...string) *syncBuffer {
	t.Helper()
	log := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return log
}

func waitFor(t *testing.T, log *syncBuffer, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true,
		func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(t, err, "waiting for %s; log:\n%s", what, log.String())
}

// get returns the status code of a GET, 0 when the request fails; the metrics server's certificate
// is self-signed.
func get(t *testing.T, url, bearer string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// freePort is a loopback TCP port free at the time of the call, never one it gave before.
func freePort(t *testing.T) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		// The kernel may give a port it just freed again: two calls in a row (a metrics and a
		// health address) must not get the same one.
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
}

// handedOut are the ports this process's tests were given.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}
