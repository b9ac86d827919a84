package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/agenttrace/internal/resources"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/ducktest"
)

// TestLoad runs the kagenti-agenttrace binary as its own process against an envtest API server, and
// measures: N Deployments, each with one pod that mounts the trace ConfigMap, and N AgentTraces →
// time until all are Active; then U spec updates, one at a time → latency from the update call to
// the ConfigMap change arriving on a watch; the controller's RSS (VmRSS, peak VmHWM) and Go heap
// (from its /metrics); its idle RSS (no AgentTrace, KAGENTI_LOAD_SETTLE (20s) after start); its API
// requests per object to converge and its API writes per minute once converged (KAGENTI_LOAD_IDLE,
// 60s; goal 0), from its client-go counters (rest_client_requests_total, Events included). It
// reports, never asserts on time or memory.
//
//	KAGENTI_LOAD=1 KUBEBUILDER_ASSETS=$PWD/bin go test -count=1 -run TestLoad -v -timeout 30m ./agenttrace/cmd/kagenti-agenttrace/
//
// KAGENTI_LOAD_N and KAGENTI_LOAD_UPDATES override 1000 and 200; KAGENTI_LOAD_ARGS adds flags
// (e.g. "--max-concurrent-reconciles=8"), KAGENTI_LOAD_ENV environment (e.g. "GOMEMLIMIT=50MiB");
// KAGENTI_LOAD_MEMORY_MAX (e.g. 256Mi) runs the controller in a memory cgroup with that limit
// (ducktest.StartController; root and a writable cgroup needed).
func TestLoad(t *testing.T) {
	if os.Getenv("KAGENTI_LOAD") != "1" {
		t.Skip("load test: set KAGENTI_LOAD=1")
	}
	n, updates := ducktest.EnvInt("KAGENTI_LOAD_N", 1000), ducktest.EnvInt("KAGENTI_LOAD_UPDATES", 200)
	settle, idle := ducktest.EnvDuration("KAGENTI_LOAD_SETTLE", 20*time.Second), ducktest.EnvDuration("KAGENTI_LOAD_IDLE", time.Minute)
	ctx := context.Background()
	root := ducktest.RepoRoot()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Setenv("KUBEBUILDER_ASSETS", filepath.Join(root, "bin"))
	}

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "deploy", "crds", "agenttrace")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "kagenti-agenttrace", Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	kubeconfig, err := user.KubeConfig()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600))

	bin := ducktest.BuildBinary(t, dir, "kagenti-agenttrace")
	metricsAddr, pprofAddr := fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t))
	args := []string{"--kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--metrics-bind-address", metricsAddr, "--metrics-secure=false", "--pprof-bind-address", pprofAddr, "--health-probe-bind-address", "0", "--zap-log-level=error"}
	args = append(args, strings.Fields(os.Getenv("KAGENTI_LOAD_ARGS"))...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), strings.Fields(os.Getenv("KAGENTI_LOAD_ENV"))...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	ctl := ducktest.StartController(t, cmd)
	pid := ctl.Pid
	t.Logf("load average at start: %s", ducktest.Loadavg())
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := ducktest.APIRequests(metricsAddr)
		return err == nil, nil
	}), "the controller's metrics endpoint never answered")
	time.Sleep(settle)
	t.Logf("LOAD idle (no AgentTrace, %v after start): RSS %.1f MiB (anonymous %.1f, file-backed %.1f); load average %s",
		settle, ducktest.ProcStatus(pid, "VmRSS"), ducktest.ProcStatus(pid, "RssAnon"), ducktest.ProcStatus(pid, "RssFile"), ducktest.Loadavg())

	scheme := k8sruntime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	ns := "load"
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	before := ducktest.MustRequests(t, metricsAddr)
	start := time.Now()
	ducktest.Parallel(t, n, 16, func(i int) error {
		name := fmt.Sprintf("agent-%d", i)
		if err := c.Create(ctx, deployment(ns, name)); err != nil {
			return err
		}
		if err := c.Create(ctx, pod(ns, name)); err != nil {
			return err
		}
		return c.Create(ctx, &v1alpha1.AgentTrace{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("trace-%d", i)},
			Spec: v1alpha1.AgentTraceSpec{
				TargetRef: duck.TargetRef{Kind: "Deployment", Name: name},
				Exporters: []v1alpha1.Exporter{{Type: v1alpha1.ExporterOTLP, Endpoint: "otel-collector.observability:4317", Insecure: true}},
			},
		})
	})
	created := time.Since(start)
	// Polled once a second: at 10,000 objects a faster poll's LISTs would compete with the controller.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := ctl.Exited(); err != nil {
			return false, err
		}
		var list v1alpha1.AgentTraceList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			// A LIST of 10,000 objects on a saturated machine can time out or lose its stream;
			// the next poll tries again (the 90-minute bound still ends a stuck run).
			t.Logf("listing to count the Active ones (retried): %v", err)
			return false, nil
		}
		active := 0
		for _, te := range list.Items {
			if te.Status.Phase == v1alpha1.PhaseActive && te.Status.ObservedGeneration == te.Generation {
				active++
			}
		}
		return active == n, nil
	}), "not all AgentTraces became Active")
	allActive := time.Since(start)
	type rss struct{ rss, anon, file float64 }
	rssActive := rss{ducktest.ProcStatus(pid, "VmRSS"), ducktest.ProcStatus(pid, "RssAnon"), ducktest.ProcStatus(pid, "RssFile")}
	memActive := ducktest.GoMemStats(t, metricsAddr)
	writesActive := ducktest.MustRequests(t, metricsAddr).Sub(before)
	loadActive := ducktest.Loadavg()
	t.Logf("LOAD n=%d (Deployments, pods, AgentTraces): created in %v; all Active after %v (from the first create); load average %s",
		n, created.Round(time.Millisecond), allActive.Round(time.Millisecond), loadActive)
	t.Logf("LOAD API requests per AgentTrace to converge: %s", writesActive.PerObject(n))

	w, err := c.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
	require.NoError(t, err)
	defer w.Stop()
	var seen ducktest.Arrivals // "<ConfigMap>/<sampler_arg>"
	go func() {
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			seen.Mark(cm.Name + "/" + cm.Data[resources.KeySamplerArg])
		}
	}()
	lat := make([]time.Duration, 0, updates)
	for u := range updates {
		i := (u * 7) % n
		rate := fmt.Sprintf("0.%03d", u+1)
		at := &v1alpha1.AgentTrace{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("trace-%d", i)}, at))
		at.Spec.Sampling = &v1alpha1.Sampling{Type: v1alpha1.SamplingProbabilistic, Rate: v1alpha1.Rate(rate)}
		key := fmt.Sprintf("agent-%d-trace/%s", i, strings.TrimRight(rate, "0"))
		t0 := time.Now()
		require.NoError(t, c.Update(ctx, at))
		lat = append(lat, seen.Await(ctx, t, key, t0, "the ConfigMap of update"))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[int(float64(len(lat)-1)*p)].Round(time.Millisecond / 10) }

	t.Logf("LOAD %d updates: update→ConfigMap changed p50=%v p90=%v p99=%v max=%v; load average %s", len(lat), pct(0.50), pct(0.90), pct(0.99), pct(1), ducktest.Loadavg())
	// The last update's status write and Events are still on their way when its ConfigMap change
	// arrives: they belong to the update, not to the idle controller.
	tail, waited := ducktest.WaitQuiet(t, metricsAddr, 10*time.Second, 2*time.Minute)
	t.Logf("LOAD after the last update: %.0f writes until none for 10s (%s, %v)", tail.Writes(), tail, waited.Round(time.Second))
	idleStart := ducktest.MustRequests(t, metricsAddr)
	time.Sleep(idle)
	idleReqs := ducktest.MustRequests(t, metricsAddr).Sub(idleStart)
	t.Logf("LOAD idle with %d converged AgentTraces: %.1f API writes per minute (%s in %v)", n, idleReqs.Writes()/idle.Minutes(), idleReqs, idle)
	memEnd := ducktest.GoMemStats(t, metricsAddr)
	t.Logf("LOAD controller RSS: %.1f MiB when all Active (anonymous %.1f, file-backed %.1f), %.1f MiB at end (anonymous %.1f, file-backed %.1f), peak %.1f MiB",
		rssActive.rss, rssActive.anon, rssActive.file, ducktest.ProcStatus(pid, "VmRSS"), ducktest.ProcStatus(pid, "RssAnon"), ducktest.ProcStatus(pid, "RssFile"), ducktest.ProcStatus(pid, "VmHWM"))
	for _, m := range []struct {
		when string
		s    map[string]float64
	}{{"all Active", memActive}, {"end", memEnd}} {
		t.Logf("LOAD controller Go memory (%s), MiB: heap in use %.1f, heap idle %.1f (released %.1f), next GC at %.1f, stacks %.1f, runtime (mspan+mcache+gc+other) %.1f, total from the OS %.1f",
			m.when, m.s["heap_inuse"], m.s["heap_idle"], m.s["heap_released"], m.s["next_gc"], m.s["stack_inuse"],
			m.s["mspan_inuse"]+m.s["mcache_inuse"]+m.s["gc_sys"]+m.s["other_sys"]+m.s["buck_hash_sys"], m.s["sys"])
	}
	ducktest.SaveHeapProfile(t, pprofAddr)
	t.Logf("load average at end: %s", ducktest.Loadavg())
}

func deployment(ns, name string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: map[string]string{"app": name},
					// As the injector leaves it (the controller only reads that the annotation exists).
					Annotations: map[string]string{contract.InjectionStatusAnnotation: `{"version":"load"}`},
				},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "example.com/agent:v1"}}},
			},
		},
	}
}

// pod is the Deployment's one replica as the injector shapes it: the trace ConfigMap mounted
// (envtest runs no controllers, so the test creates it).
func pod(ns, app string) *corev1.Pod {
	cm := app + "-trace"
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: app + "-0", Namespace: ns, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "agent", Image: "example.com/agent:v1",
				VolumeMounts: []corev1.VolumeMount{{Name: contract.VolumeTrace, MountPath: "/etc/kagenti/trace"}}}},
			Volumes: []corev1.Volume{{Name: contract.VolumeTrace, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Optional: ptr.To(true)}}}},
		},
	}
}
