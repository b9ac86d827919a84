package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

// TestScale1000Cards measures the controller with 1,000 AgentCards × 3 pods on loopback servers:
// time to the first full sync, steady-state fetches per second, status writes per minute while
// nothing changes, and the process RSS. It runs only with AGENTCARD_BENCH=1 (minutes, thousands of
// objects) and asserts nothing about time; it logs the numbers.
//
//	AGENTCARD_BENCH=1 KUBEBUILDER_ASSETS=$PWD/bin go test -count=1 -run TestScale1000Cards -v -timeout 30m ./agentcard/internal/controller/
func TestScale1000Cards(t *testing.T) {
	if os.Getenv("AGENTCARD_BENCH") == "" {
		t.Skip("benchmark: set AGENTCARD_BENCH=1 to run")
	}
	cards, podsPer := 1000, 3
	if n := os.Getenv("AGENTCARD_BENCH_CARDS"); n != "" {
		fmt.Sscan(n, &cards)
	}
	ctx := context.Background()
	ns := newNamespace(t)
	var requests atomic.Int64
	body := testcards.Weather("1.0.0")
	etag := `"bench"`
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write(body)
	})
	ip := func(i int) string { return fmt.Sprintf("127.43.%d.%d", i/250, i%250+1) }
	for i := 0; i < cards*podsPer; i++ {
		serveOn(t, ip(i), h)
	}
	// Pods and cards are created in parallel (the API server, not the test, is the bottleneck).
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	start := time.Now()
	for c := 0; c < cards; c++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			labels := map[string]string{"app": fmt.Sprintf("bench-%d", c)}
			for p := 0; p < podsPer; p++ {
				makePod(t, ns, fmt.Sprintf("bench-%d-%d", c, p), ip(c*podsPer+p), "", labels)
			}
			card := selectorCard(ns, fmt.Sprintf("bench-%d", c), labels, func(a *v1alpha1.AgentCard) {
				a.Spec.SyncPeriod = &metav1.Duration{Duration: 10 * time.Second}
			})
			if err := k8s.Create(ctx, card); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	created := time.Since(start)
	for {
		var list v1alpha1.AgentCardList
		require.NoError(t, k8s.List(ctx, &list, client.InNamespace(ns)))
		ready := 0
		for _, c := range list.Items {
			if meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionReady) &&
				meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionSynced) && len(c.Status.Cards) == podsPer {
				ready++
			}
		}
		if ready == cards {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	firstSync := time.Since(start)
	t.Logf("created %d pods + %d AgentCards in %s; all Ready with %d pod entries after %s", cards*podsPer, cards, created.Round(time.Millisecond), podsPer, firstSync.Round(time.Millisecond))

	// Steady state: let one sync period pass, then measure for 60s.
	time.Sleep(12 * time.Second)
	writes0, req0, fetches0 := statusWrites(t), requests.Load(), fetchResults(t)
	window := 60 * time.Second
	time.Sleep(window)
	writes, reqs, fetches := statusWrites(t)-writes0, requests.Load()-req0, fetchResults(t)
	for result, n := range fetches0 {
		fetches[result] -= n
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("steady state over %s: %.0f fetches/s (by result: %v), %.0f status writes/min", window, float64(reqs)/window.Seconds(), fetches, writes/window.Minutes())
	t.Logf("process RSS %s (test process: controller + API clients + %d loopback servers), Go heap in use %d MiB", rss(), cards*podsPer, ms.HeapInuse>>20)
}

func statusWrites(t *testing.T) float64 {
	mfs, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "kagenti_agentcard_status_writes_total" {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "result" && l.GetValue() == "applied" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// fetchResults counts the controller's card fetches by result (NotModified, Success, Timeout…).
// A failed fetch can be a genuine change of a pod's entry: idle writes only mean something next
// to these counts.
func fetchResults(t *testing.T) map[string]uint64 {
	mfs, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "kagenti_agentcard_fetch_duration_seconds" {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "result" {
					out[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}

func rss() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:"))
		}
	}
	return "unknown"
}
