package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// TestLoad runs the kagenti-injector binary, built as the Dockerfile builds it, as its own process
// behind the deployed MutatingWebhookConfiguration of an envtest API server (serving certificate
// from envtest, i.e. --cert-dir: no rotator), and measures, never asserting on time or memory:
//
//   - idle: its RSS (anonymous/file-backed) KAGENTI_LOAD_SETTLE (20s) after start;
//
//   - N labelled Deployments created through the webhook (16 at a time): create latency p50/p99,
//     then its RSS and peak, and its own API requests (it makes none per admission).
//
//     KAGENTI_LOAD=1 KUBEBUILDER_ASSETS=$PWD/bin go test -count=1 -run TestLoad -v -timeout 30m ./injector/cmd/kagenti-injector/
//
// KAGENTI_LOAD_N overrides 1000; KAGENTI_LOAD_ENV adds environment (e.g. "GOMEMLIMIT=32MiB").
func TestLoad(t *testing.T) {
	if os.Getenv("KAGENTI_LOAD") != "1" {
		t.Skip("load test: set KAGENTI_LOAD=1")
	}
	n := envInt("KAGENTI_LOAD_N", 1000)
	settle := envDuration("KAGENTI_LOAD_SETTLE", 20*time.Second)
	ctx := context.Background()
	root := repoRoot()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Setenv("KUBEBUILDER_ASSETS", filepath.Join(root, "bin"))
	}
	t.Logf("load average at start: %s", loadavg())

	wh := &admissionv1.MutatingWebhookConfiguration{}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "kustomize", "injector", "mutatingwebhookconfiguration.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, wh))
	env := &envtest.Environment{WebhookInstallOptions: envtest.WebhookInstallOptions{MutatingWebhooks: []*admissionv1.MutatingWebhookConfiguration{wh}}}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "kagenti-injector", Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	kubeconfig, err := user.KubeConfig()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600))

	bin := filepath.Join(dir, "kagenti-injector")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	require.NoError(t, build.Run(), "building the binary")
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	wo := env.WebhookInstallOptions
	cmd := exec.Command(bin, "--kubeconfig", filepath.Join(dir, "kubeconfig"), "--metrics-bind-address", metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address", "0", "--zap-log-level=error", "--config", filepath.Join(dir, "absent.yaml"),
		"--webhook-host", wo.LocalServingHost, "--webhook-port", strconv.Itoa(wo.LocalServingPort), "--cert-dir", wo.LocalServingCertDir)
	cmd.Env = append(os.Environ(), strings.Fields(os.Getenv("KAGENTI_LOAD_ENV"))...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := apiRequests(metricsAddr)
		return err == nil, nil
	}), "the injector's metrics endpoint never answered")
	time.Sleep(settle)
	t.Logf("LOAD idle (%v after start): RSS %.1f MiB (anonymous %.1f, file-backed %.1f); load average %s",
		settle, procStatus(pid, "VmRSS"), procStatus(pid, "RssAnon"), procStatus(pid, "RssFile"), loadavg())

	c, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	ns := "load"
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"kagenti.io/injection": "enabled"}}}))
	before, err := apiRequests(metricsAddr)
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		lats []time.Duration
	)
	start := time.Now()
	parallel(t, n, 16, func(i int) error {
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("agent-%d", i), Labels: map[string]string{"kagenti.io/inject": "enabled"}},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "example.com/agent:v1"}}},
				},
			},
		}
		t0 := time.Now()
		if err := c.Create(ctx, d); err != nil {
			return err
		}
		if len(d.Spec.Template.Spec.InitContainers)+len(d.Spec.Template.Spec.Containers) < 2 {
			return fmt.Errorf("deployment %s was not injected", d.Name)
		}
		mu.Lock()
		lats = append(lats, time.Since(t0))
		mu.Unlock()
		return nil
	})
	elapsed := time.Since(start)
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	pct := func(p float64) time.Duration { return lats[int(float64(len(lats)-1)*p)].Round(time.Millisecond / 10) }
	after, err := apiRequests(metricsAddr)
	require.NoError(t, err)
	t.Logf("LOAD n=%d injected Deployments in %v: create p50=%v p99=%v; load average %s", n, elapsed.Round(time.Millisecond), pct(0.5), pct(0.99), loadavg())
	t.Logf("LOAD injector API requests during the run: %s", after.sub(before))
	t.Logf("LOAD injector RSS after %d admissions: %.1f MiB (anonymous %.1f, file-backed %.1f), peak %.1f MiB",
		n, procStatus(pid, "VmRSS"), procStatus(pid, "RssAnon"), procStatus(pid, "RssFile"), procStatus(pid, "VmHWM"))
}

// requests counts the injector's API requests by HTTP method.
type requests map[string]float64

func (r requests) sub(o requests) requests {
	out := requests{}
	for m, v := range r {
		out[m] = v - o[m]
	}
	return out
}

func (r requests) String() string {
	methods := make([]string, 0, len(r))
	for m := range r {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	parts := make([]string, 0, len(methods))
	for _, m := range methods {
		parts = append(parts, fmt.Sprintf("%s %.0f", m, r[m]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// apiRequests sums rest_client_requests_total (client-go's counter of every API request) from the
// injector's metrics, by method.
func apiRequests(addr string) (requests, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := requests{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		labels, value, ok := strings.Cut(strings.TrimPrefix(s.Text(), "rest_client_requests_total{"), "} ")
		if !ok || !strings.HasPrefix(s.Text(), "rest_client_requests_total{") {
			continue
		}
		v, _ := strconv.ParseFloat(value, 64)
		for _, l := range strings.Split(labels, ",") {
			if m, ok := strings.CutPrefix(l, `method="`); ok {
				out[strings.TrimSuffix(m, `"`)] += v
			}
		}
	}
	return out, s.Err()
}

// procStatus reads a memory line (VmRSS, RssAnon, RssFile, VmHWM) of /proc/<pid>/status, in MiB.
func procStatus(pid int, key string) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), key+":"); ok {
			var kb float64
			_, _ = fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
			return kb / 1024
		}
	}
	return -1
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func parallel(t *testing.T, n, workers int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}
