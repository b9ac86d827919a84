package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/resources"
	"github.com/kagenti/platform/agentbuild/internal/templates"
	"github.com/kagenti/platform/agentbuild/internal/testsupport"
	"github.com/kagenti/platform/pkg/duck/ducktest"
)

// TestLoad runs the kagenti-agentbuild binary, built as the Dockerfile builds it, as its own
// process against an envtest API server with Tekton's CRDs (no Tekton controller: the test plays
// Tekton, marking every PipelineRun it sees Succeeded with IMAGE_URL and IMAGE_DIGEST results).
// It measures, and never asserts on time or memory:
//   - idle: the controller's RSS with no AgentBuild, after KAGENTI_LOAD_SETTLE (20s);
//   - N AgentBuilds created → time until every one is Ready for its generation, API writes per build;
//   - U spec updates, one at a time → latency from the update call to the new generation's
//     PipelineRun arriving on a watch (p50/p90/p99/max);
//   - then, with everything converged, the API writes the controller makes in KAGENTI_LOAD_IDLE
//     (60s), per minute (goal 0), and its RSS (VmRSS, anonymous/file-backed, peak VmHWM).
//
// The API requests are the controller's own client-go counters (rest_client_requests_total on its
// /metrics), Events included.
//
//	KAGENTI_LOAD=1 KUBEBUILDER_ASSETS=$PWD/bin go test -count=1 -run TestLoad -v -timeout 120m ./agentbuild/cmd/kagenti-agentbuild/
//
// KAGENTI_LOAD_N and KAGENTI_LOAD_UPDATES override 10000 and 200; KAGENTI_LOAD_ARGS adds flags,
// KAGENTI_LOAD_ENV environment (e.g. "GOMEMLIMIT=32MiB"); KAGENTI_LOAD_PROFILE names a file for the
// controller's heap profile at the end.
func TestLoad(t *testing.T) {
	if os.Getenv("KAGENTI_LOAD") != "1" {
		t.Skip("load test: set KAGENTI_LOAD=1")
	}
	n, updates := ducktest.EnvInt("KAGENTI_LOAD_N", 10000), ducktest.EnvInt("KAGENTI_LOAD_UPDATES", 200)
	settle, idle := ducktest.EnvDuration("KAGENTI_LOAD_SETTLE", 20*time.Second), ducktest.EnvDuration("KAGENTI_LOAD_IDLE", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Setenv("KUBEBUILDER_ASSETS", testsupport.Assets(t))
	}
	t.Logf("load average at start: %s", ducktest.Loadavg())

	env := &envtest.Environment{
		CRDDirectoryPaths:        []string{testsupport.CRDDir(), testsupport.TektonCRDDir(t)},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: testsupport.ControlPlaneStartTimeout,
	}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "kagenti-agentbuild", Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	kubeconfig, err := user.KubeConfig()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600))

	scheme := k8sruntime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	require.NoError(t, pipelinev1.AddToScheme(scheme)) // the test's own view of Tekton, as Tekton has it
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: templates.DefaultNamespace}}))
	for _, cm := range testsupport.DefaultTemplates(t, templates.DefaultNamespace) {
		require.NoError(t, c.Create(ctx, cm))
	}
	ns := "load"
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	bin := ducktest.BuildBinary(t, dir, "kagenti-agentbuild")
	metricsAddr, pprofAddr := fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t))
	extra := strings.Fields(os.Getenv("KAGENTI_LOAD_ARGS"))
	args := append([]string{"--kubeconfig", filepath.Join(dir, "kubeconfig"), "--metrics-bind-address", metricsAddr, "--metrics-secure=false",
		"--pprof-bind-address", pprofAddr, "--health-probe-bind-address", "0", "--zap-log-level=error"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), strings.Fields(os.Getenv("KAGENTI_LOAD_ENV"))...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	t.Logf("controller: pid %d, %s %s", pid, os.Getenv("KAGENTI_LOAD_ENV"), strings.Join(extra, " "))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := ducktest.APIRequests(metricsAddr)
		return err == nil, nil
	}), "the controller's metrics endpoint never answered")

	time.Sleep(settle)
	t.Logf("LOAD idle (no AgentBuild, %v after start): RSS %.1f MiB (anonymous %.1f, file-backed %.1f); load average %s",
		settle, ducktest.ProcStatus(pid, "VmRSS"), ducktest.ProcStatus(pid, "RssAnon"), ducktest.ProcStatus(pid, "RssFile"), ducktest.Loadavg())
	if n == 0 {
		return
	}

	tekton := playTekton(ctx, t, cfg, c, scheme)
	builds := buildCache(ctx, t, cfg, scheme)
	before := ducktest.MustRequests(t, metricsAddr)

	start := time.Now()
	ducktest.Parallel(t, n, 16, func(i int) error { return c.Create(ctx, newBuild(ns, fmt.Sprintf("agent-%d", i))) })
	created := time.Since(start)
	waitConverged(ctx, t, builds, n, 90*time.Minute)
	converged := time.Since(start)
	rssConverged := [3]float64{ducktest.ProcStatus(pid, "VmRSS"), ducktest.ProcStatus(pid, "RssAnon"), ducktest.ProcStatus(pid, "RssFile")}
	afterCreate := ducktest.MustRequests(t, metricsAddr)
	t.Logf("LOAD n=%d AgentBuilds: created in %v; all Ready for their generation after %v (from the first create); load average %s",
		n, created.Round(time.Millisecond), converged.Round(time.Millisecond), ducktest.Loadavg())
	t.Logf("LOAD API requests per AgentBuild to converge: %s", afterCreate.Sub(before).PerObject(n))

	lat := make([]time.Duration, 0, updates)
	for u := range updates {
		name := fmt.Sprintf("agent-%d", (u*7919)%n)
		b := &v1alpha1.AgentBuild{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, b))
		b.Spec.BuildOutput.Tag = fmt.Sprintf("u%d", u)
		t0 := time.Now()
		require.NoError(t, c.Update(ctx, b))
		run := resources.RunName(b)
		require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
			at, ok := tekton.seenAt(run)
			if ok {
				lat = append(lat, at.Sub(t0))
			}
			return ok, nil
		}), "update %d of %s never created PipelineRun %s", u, name, run)
	}
	waitConverged(ctx, t, builds, n, 30*time.Minute)
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		pct := func(p float64) time.Duration { return lat[int(float64(len(lat)-1)*p)].Round(time.Millisecond / 10) }
		t.Logf("LOAD %d spec updates: update → new generation's PipelineRun on a watch p50=%v p90=%v p99=%v max=%v; load average %s",
			len(lat), pct(0.50), pct(0.90), pct(0.99), pct(1), ducktest.Loadavg())
	}

	// The last builds' status writes and Events (the broadcaster sends them asynchronously) are
	// still on their way when the test sees them Ready: they belong to the updates, not to the
	// idle controller.
	tail, waited := ducktest.WaitQuiet(t, metricsAddr, 10*time.Second, 2*time.Minute)
	t.Logf("LOAD after the last update: %.0f writes until none for 10s (%s, %v)", tail.Writes(), tail, waited.Round(time.Second))
	idleStart := ducktest.MustRequests(t, metricsAddr)
	time.Sleep(idle)
	idleWrites := ducktest.MustRequests(t, metricsAddr).Sub(idleStart)
	t.Logf("LOAD idle with %d converged AgentBuilds: %.1f API writes per minute (%s in %v)",
		n, float64(idleWrites.Writes())/idle.Minutes(), idleWrites, idle)
	t.Logf("LOAD controller RSS: %.1f MiB when all Ready (anonymous %.1f, file-backed %.1f), %.1f MiB at end (anonymous %.1f, file-backed %.1f), peak %.1f MiB",
		rssConverged[0], rssConverged[1], rssConverged[2], ducktest.ProcStatus(pid, "VmRSS"), ducktest.ProcStatus(pid, "RssAnon"), ducktest.ProcStatus(pid, "RssFile"), ducktest.ProcStatus(pid, "VmHWM"))
	ducktest.SaveHeapProfile(t, pprofAddr)
	t.Logf("load average at end: %s", ducktest.Loadavg())
}

func newBuild(ns, name string) *v1alpha1.AgentBuild {
	return &v1alpha1.AgentBuild{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentBuildSpec{
			Source:      v1alpha1.Source{Repository: "https://github.com/kagenti/agent-examples", Subfolder: "a2a/weather_service"},
			BuildOutput: v1alpha1.BuildOutput{Image: "kagenti/" + name},
		},
	}
}

// tektonPlayer marks every PipelineRun it sees Succeeded, as Tekton would once the build ran, and
// remembers when each run was first seen.
type tektonPlayer struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (p *tektonPlayer) seenAt(name string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.seen[name]
	return at, ok
}

func playTekton(ctx context.Context, t *testing.T, cfg *rest.Config, c client.Client, scheme *k8sruntime.Scheme) *tektonPlayer {
	t.Helper()
	p := &tektonPlayer{seen: map[string]time.Time{}}
	runs, err := cache.New(cfg, cache.Options{Scheme: scheme})
	require.NoError(t, err)
	inf, err := runs.GetInformer(ctx, &pipelinev1.PipelineRun{})
	require.NoError(t, err)
	todo := make(chan client.ObjectKey, 1<<16)
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		run, ok := obj.(*pipelinev1.PipelineRun)
		if !ok {
			return
		}
		p.mu.Lock()
		if _, ok := p.seen[run.Name]; !ok {
			p.seen[run.Name] = time.Now()
		}
		p.mu.Unlock()
		if run.Status.GetCondition(apis.ConditionSucceeded) == nil {
			todo <- client.ObjectKeyFromObject(run)
		}
	}})
	require.NoError(t, err)
	go func() { _ = runs.Start(ctx) }()
	require.True(t, runs.WaitForCacheSync(ctx))
	for range 8 {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case key := <-todo:
					if err := succeed(ctx, c, key); err != nil && ctx.Err() == nil {
						t.Errorf("playing Tekton for %s: %v", key, err)
					}
				}
			}
		}()
	}
	return p
}

// succeed writes the Succeeded condition, times and image results of a finished run.
func succeed(ctx context.Context, c client.Client, key client.ObjectKey) error {
	for range 10 {
		run := &pipelinev1.PipelineRun{}
		if err := c.Get(ctx, key, run); err != nil {
			return client.IgnoreNotFound(err)
		}
		now := metav1.Now()
		run.Status.StartTime, run.Status.CompletionTime = &now, &now
		run.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionTrue, Reason: "Succeeded",
			Message: "Tasks Completed: 2 (Failed: 0, Cancelled 0), Skipped: 0"})
		run.Status.Results = []pipelinev1.PipelineRunResult{
			{Name: resources.ResultImageURL, Value: *pipelinev1.NewStructuredValues("registry.local:5000/kagenti/" + key.Name + ":latest")},
			{Name: resources.ResultImageDigest, Value: *pipelinev1.NewStructuredValues("sha256:" + strings.Repeat("ab", 32))},
		}
		err := c.Status().Update(ctx, run)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("conflicts on every try")
}

// buildCache is the test's informer cache of AgentBuilds, to count converged builds cheaply.
func buildCache(ctx context.Context, t *testing.T, cfg *rest.Config, scheme *k8sruntime.Scheme) cache.Cache {
	t.Helper()
	cc, err := cache.New(cfg, cache.Options{Scheme: scheme})
	require.NoError(t, err)
	_, err = cc.GetInformer(ctx, &v1alpha1.AgentBuild{})
	require.NoError(t, err)
	go func() { _ = cc.Start(ctx) }()
	require.True(t, cc.WaitForCacheSync(ctx))
	return cc
}

// waitConverged waits until every AgentBuild is Ready for its current generation.
func waitConverged(ctx context.Context, t *testing.T, builds cache.Cache, n int, timeout time.Duration) {
	t.Helper()
	last := ""
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list := &v1alpha1.AgentBuildList{}
		if err := builds.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return false, err
		}
		ready := 0
		for i := range list.Items {
			b := &list.Items[i]
			if b.Status.ObservedGeneration == b.Generation && b.Status.IsReady() {
				ready++
			}
		}
		last = fmt.Sprintf("%d of %d listed Ready", ready, len(list.Items))
		return ready == n, nil
	})
	require.NoError(t, err, "not every AgentBuild became Ready: %s", last)
}
