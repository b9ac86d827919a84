package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

	"github.com/kagenti/platform/pkg/duck/ducktest"
)

// TestLoad runs the kagenti-injector binary, built as the Dockerfile builds it, as its own process
// behind the deployed MutatingWebhookConfiguration of an envtest API server (serving certificate
// from envtest, i.e. --cert-dir: no rotator), and measures, never asserting on time or memory:
//
//   - idle: its RSS (anonymous/file-backed) KAGENTI_LOAD_SETTLE (20s) after start;
//
//   - N labelled Deployments created through the webhook (16 at a time): create latency p50/p99,
//     then its RSS and peak, and its own API requests (it makes none per admission);
//
//   - from its own metrics endpoint, during those admissions: its GC cycles and bytes allocated, and its handler's
//     latency histogram (kagenti_injector_mutation_duration_seconds) p50/p99.
//
//     KAGENTI_LOAD=1 KUBEBUILDER_ASSETS=$PWD/bin go test -count=1 -run TestLoad -v -timeout 30m ./injector/cmd/kagenti-injector/
//
// KAGENTI_LOAD_N overrides 1000, KAGENTI_LOAD_CONCURRENCY 16; KAGENTI_LOAD_ENV adds environment
// (e.g. "GOMEMLIMIT=32MiB", "GOGC=400").
func TestLoad(t *testing.T) {
	if os.Getenv("KAGENTI_LOAD") != "1" {
		t.Skip("load test: set KAGENTI_LOAD=1")
	}
	n := ducktest.EnvInt("KAGENTI_LOAD_N", 1000)
	settle := ducktest.EnvDuration("KAGENTI_LOAD_SETTLE", 20*time.Second)
	ctx := context.Background()
	root := ducktest.RepoRoot()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Setenv("KUBEBUILDER_ASSETS", filepath.Join(root, "bin"))
	}
	t.Logf("load average at start: %s", ducktest.Loadavg())

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

	bin := ducktest.BuildBinary(t, dir, "kagenti-injector")
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t))
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
		_, err := ducktest.APIRequests(metricsAddr)
		return err == nil, nil
	}), "the injector's metrics endpoint never answered")
	time.Sleep(settle)
	t.Logf("LOAD idle (%v after start): RSS %.1f MiB (anonymous %.1f, file-backed %.1f); load average %s",
		settle, ducktest.ProcStatus(pid, "VmRSS"), ducktest.ProcStatus(pid, "RssAnon"), ducktest.ProcStatus(pid, "RssFile"), ducktest.Loadavg())

	c, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	ns := "load"
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"kagenti.io/injection": "enabled"}}}))
	before, err := ducktest.APIRequests(metricsAddr)
	require.NoError(t, err)
	gcBefore := scrapeInjector(t, metricsAddr)
	var (
		mu   sync.Mutex
		lats []time.Duration
	)
	start := time.Now()
	concurrency := ducktest.EnvInt("KAGENTI_LOAD_CONCURRENCY", 16)
	ducktest.Parallel(t, n, concurrency, func(i int) error {
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
	after, err := ducktest.APIRequests(metricsAddr)
	require.NoError(t, err)
	t.Logf("LOAD n=%d injected Deployments in %v: create p50=%v p99=%v; load average %s", n, elapsed.Round(time.Millisecond), pct(0.5), pct(0.99), ducktest.Loadavg())
	t.Logf("LOAD injector API requests during the run: %s", after.Sub(before))
	run := scrapeInjector(t, metricsAddr).since(gcBefore)
	t.Logf("LOAD injector during the %d admissions (concurrency %d): %.0f GC cycles (GOGC %.0f), %.1f KB allocated per admission; handler histogram %.0f requests, p50 %v, p99 %v",
		n, concurrency, run.gcCycles, run.gogc, run.allocated/float64(n)/1000, run.count, run.quantile(0.5), run.quantile(0.99))
	t.Logf("LOAD injector RSS after %d admissions: %.1f MiB (anonymous %.1f, file-backed %.1f), peak %.1f MiB",
		n, ducktest.ProcStatus(pid, "VmRSS"), ducktest.ProcStatus(pid, "RssAnon"), ducktest.ProcStatus(pid, "RssFile"), ducktest.ProcStatus(pid, "VmHWM"))
}

// injectorMetrics are what TestLoad reads of the injector's metrics endpoint: its GC cycles and its
// handler's latency histogram (cumulative bucket counts by upper bound, in seconds).
type injectorMetrics struct {
	gcCycles, gogc, count, allocated float64
	buckets                          map[float64]float64
}

func scrapeInjector(t *testing.T, addr string) injectorMetrics {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	m := injectorMetrics{buckets: map[float64]float64{}}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		name, v, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch {
		case name == "go_gc_duration_seconds_count":
			m.gcCycles = f
		case name == "go_memstats_alloc_bytes_total":
			m.allocated = f
		case name == "go_gc_gogc_percent":
			m.gogc = f
		case name == "kagenti_injector_mutation_duration_seconds_count":
			m.count = f
		case strings.HasPrefix(name, `kagenti_injector_mutation_duration_seconds_bucket{le="`):
			le := strings.TrimSuffix(strings.TrimPrefix(name, `kagenti_injector_mutation_duration_seconds_bucket{le="`), `"}`)
			if bound, err := strconv.ParseFloat(le, 64); err == nil { // +Inf parses too
				m.buckets[bound] = f
			}
		}
	}
	require.NoError(t, s.Err())
	return m
}

// since is what happened between prev and m.
func (m injectorMetrics) since(prev injectorMetrics) injectorMetrics {
	out := injectorMetrics{gcCycles: m.gcCycles - prev.gcCycles, gogc: m.gogc, count: m.count - prev.count, allocated: m.allocated - prev.allocated, buckets: map[float64]float64{}}
	for b, c := range m.buckets {
		out.buckets[b] = c - prev.buckets[b]
	}
	return out
}

// quantile estimates quantile q by linear interpolation inside the bucket (as histogram_quantile).
func (m injectorMetrics) quantile(q float64) time.Duration {
	bounds := slices.Sorted(maps.Keys(m.buckets))
	rank := q * m.count
	prevBound, prevCount := 0.0, 0.0
	for _, b := range bounds {
		c := m.buckets[b]
		if c >= rank && !math.IsInf(b, 1) {
			frac := 1.0
			if c > prevCount {
				frac = (rank - prevCount) / (c - prevCount)
			}
			return time.Duration((prevBound + frac*(b-prevBound)) * float64(time.Second))
		}
		if !math.IsInf(b, 1) {
			prevBound, prevCount = b, c
		}
	}
	return time.Duration(prevBound * float64(time.Second))
}
