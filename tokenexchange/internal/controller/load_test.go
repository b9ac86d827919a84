package controller_test

import (
	"bufio"
	"context"
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
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/resources"
)

// TestLoad measures the controller running in this process against the envtest API server:
// N TokenExchanges with their N Deployments → time until all are Active; then U spec updates →
// latency from the update to the ConfigMap content changing (seen through a watch); process RSS.
// Not part of `make test`: KAGENTI_LOAD=1 go test -run TestLoad -v ./tokenexchange/internal/controller/
// (KAGENTI_LOAD_N, KAGENTI_LOAD_UPDATES override 1000 and 200). It reports, never asserts on time.
func TestLoad(t *testing.T) {
	if os.Getenv("KAGENTI_LOAD") != "1" {
		t.Skip("load test: set KAGENTI_LOAD=1")
	}
	n, updates := envInt("KAGENTI_LOAD_N", 1000), envInt("KAGENTI_LOAD_UPDATES", 200)
	ctx := context.Background()
	ns := namespace(t)

	start := time.Now()
	parallel(t, n, 16, func(i int) error {
		if err := k8s.Create(ctx, deployment(ns, fmt.Sprintf("agent-%d", i), 1, true)); err != nil {
			return err
		}
		return k8s.Create(ctx, tokenExchange(ns, fmt.Sprintf("tx-%d", i), fmt.Sprintf("agent-%d", i)))
	})
	created := time.Since(start)
	var active int
	for {
		var list v1alpha1.TokenExchangeList
		require.NoError(t, k8s.List(ctx, &list, client.InNamespace(ns)))
		active = 0
		for _, te := range list.Items {
			if te.Status.Phase == v1alpha1.PhaseActive && te.Status.ObservedGeneration == te.Generation {
				active++
			}
		}
		if active == n || time.Since(start) > 10*time.Minute {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	allActive := time.Since(start)
	require.Equal(t, n, active, "not all TokenExchanges became Active")
	rssActive := rssMiB()

	// Updates, one at a time: latency from just before the update call to the ConfigMap change
	// arriving on a watch.
	wc, err := client.NewWithWatch(restConfig, client.Options{Scheme: scheme})
	require.NoError(t, err)
	w, err := wc.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
	require.NoError(t, err)
	defer w.Stop()
	var mu sync.Mutex
	seen := map[string]time.Time{}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Modified {
				continue
			}
			cm := ev.Object.(*corev1.ConfigMap)
			routes := cm.Data[resources.ConfigKey]
			if i := strings.Index(routes, "audience: upd-"); i >= 0 {
				marker := strings.Fields(routes[i+len("audience: "):])[0]
				mu.Lock()
				if _, ok := seen[marker]; !ok {
					seen[marker] = time.Now()
				}
				mu.Unlock()
			}
		}
	}()
	lat := make([]time.Duration, 0, updates)
	for u := range updates {
		name := fmt.Sprintf("tx-%d", (u*7)%n)
		marker := fmt.Sprintf("upd-%d", u)
		te := getTX(ctx, t, ns, name)
		te.Spec.Outbound = &v1alpha1.OutboundSpec{TokenExchange: &v1alpha1.OutboundTokenExchangeSpec{
			DefaultTarget: &v1alpha1.ExchangeTarget{Audience: marker}}}
		t0 := time.Now()
		require.NoError(t, k8s.Update(ctx, te))
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			at, ok := seen[marker]
			mu.Unlock()
			if ok {
				lat = append(lat, at.Sub(t0))
				break
			}
			require.True(t, time.Now().Before(deadline), "update %s never reached its ConfigMap", marker)
			time.Sleep(time.Millisecond)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[int(float64(len(lat)-1)*p)] }
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("LOAD n=%d: create %v; all Active after %v (from the first create)", n, created.Round(time.Millisecond), allActive.Round(time.Millisecond))
	t.Logf("LOAD %d updates: update→ConfigMap changed p50=%v p90=%v p99=%v max=%v", len(lat),
		pct(0.50).Round(time.Millisecond/10), pct(0.90).Round(time.Millisecond/10), pct(0.99).Round(time.Millisecond/10), lat[len(lat)-1].Round(time.Millisecond/10))
	t.Logf("LOAD RSS (controller + test harness + clients, one process): %.1f MiB when all Active, %.1f MiB at end; Go heap in use %.1f MiB",
		rssActive, rssMiB(), float64(ms.HeapInuse)/(1<<20))
}

func parallel(t *testing.T, n, workers int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range workers {
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

func rssMiB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), "VmRSS:") {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(s.Text(), "VmRSS:")), "%f", &kb)
			return kb / 1024
		}
	}
	return -1
}

func envInt(name string, def int) int {
	var v int
	if _, err := fmt.Sscanf(os.Getenv(name), "%d", &v); err != nil || v <= 0 {
		return def
	}
	return v
}
