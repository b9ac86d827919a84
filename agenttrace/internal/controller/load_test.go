package controller

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
)

// TestLoad is the load benchmark (not part of `make test`):
//
//	KAGENTI_LOAD=1 KUBEBUILDER_ASSETS=$PWD/bin go test -run TestLoad -v -timeout 30m ./agenttrace/internal/controller/
//
// 1,000 Deployments + 1,000 AgentTraces against the real API server with the controller in-process
// → time until all are Active; then 200 sequential spec updates → latency from the update to the
// ConfigMap change (observed through a watch), p50/p99; then the process RSS and Go heap.
func TestLoad(t *testing.T) {
	if os.Getenv("KAGENTI_LOAD") != "1" {
		t.Skip("load benchmark: set KAGENTI_LOAD=1 to run it")
	}
	n := 1000
	if s := os.Getenv("KAGENTI_LOAD_N"); s != "" {
		_, _ = fmt.Sscan(s, &n)
	}
	ns := newNamespace(t)
	start := time.Now()
	parallel(t, n, 16, func(i int) error {
		d := deploymentObj(ns, fmt.Sprintf("agent-%d", i))
		if err := k8s.Create(ctx, d); err != nil {
			return err
		}
		return k8s.Create(ctx, agentTrace(ns, fmt.Sprintf("trace-%d", i), d.Name))
	})
	created := time.Since(start)
	eventually := func() {
		deadline := time.Now().Add(20 * time.Minute)
		for time.Now().Before(deadline) {
			var list v1alpha1.AgentTraceList
			require.NoError(t, k8s.List(ctx, &list, client.InNamespace(ns)))
			active := 0
			for _, at := range list.Items {
				if at.Status.Phase == v1alpha1.PhaseActive && at.Status.ObservedGeneration == at.Generation {
					active++
				}
			}
			if active == n {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatal("not all AgentTraces became Active")
	}
	eventually()
	allActive := time.Since(start)
	t.Logf("LOAD: %d Deployments + AgentTraces created in %v; all Active after %v (%.0f AgentTraces/s)",
		n, created.Round(time.Millisecond), allActive.Round(time.Millisecond), float64(n)/allActive.Seconds())

	// Update latency, observed with a watch on the ConfigMaps.
	cs, err := kubernetes.NewForConfig(testCfg)
	require.NoError(t, err)
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	defer w.Stop()
	updates := 200
	var lat []time.Duration
	for i := 0; i < updates; i++ {
		name := fmt.Sprintf("trace-%d", i*n/updates)
		rate := fmt.Sprintf("0.%03d", i+1)
		at := getAT(t, ns, name)
		at.Spec.Sampling = &v1alpha1.Sampling{Type: v1alpha1.SamplingProbabilistic, Rate: v1alpha1.Rate(rate)}
		t0 := time.Now()
		require.NoError(t, k8s.Update(ctx, at))
		want := strings.TrimRight(rate, "0")
		target := at.Spec.TargetRef.Name + "-trace"
		for done := false; !done; {
			select {
			case ev := <-w.ResultChan():
				if ev.Type != watch.Modified {
					continue
				}
				cm := ev.Object.(*corev1.ConfigMap)
				if cm.Name == target && cm.Data["sampler_arg"] == want {
					lat = append(lat, time.Since(t0))
					done = true
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("ConfigMap %s never showed sampler_arg %s", target, want)
			}
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(100 * time.Microsecond) }
	t.Logf("LOAD: %d updates → ConfigMap changed: p50 %v, p90 %v, p99 %v, max %v", updates, pct(0.5), pct(0.9), pct(0.99), lat[len(lat)-1].Round(100*time.Microsecond))

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("LOAD: process VmRSS %s (test process: controller + envtest client + test data); Go heap in use %.1f MiB",
		vmRSS(), float64(ms.HeapInuse)/(1<<20))
}

func deploymentObj(ns, name string) *appsDeployment {
	d := newDeploymentObj(ns, name)
	d.Spec.Template.Annotations = map[string]string{InjectionStatusAnnotation: "{}"}
	return d
}

func vmRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
		}
	}
	return "unknown"
}

// parallel runs f(0..n-1) on workers goroutines and fails on the first error.
func parallel(t *testing.T, n, workers int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
