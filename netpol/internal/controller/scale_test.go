package controller

import (
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
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/netpol/api"
	"github.com/kagenti/platform/netpol/internal/resources"
	"github.com/kagenti/platform/netpol/internal/view"
)

// TestScale is the load benchmark (not a pass/fail test): 1,000 AgentCards → time until every
// policy exists; 100 verification flips → flip-to-policy latency; RSS of the process.
// Run: NETPOL_SCALE=1 KUBEBUILDER_ASSETS=$PWD/bin go test -count=1 -run TestScale -v ./netpol/internal/controller/
func TestScale(t *testing.T) {
	if os.Getenv("NETPOL_SCALE") == "" {
		t.Skip("load benchmark; set NETPOL_SCALE=1 to run it")
	}
	const cards, flips = 1000, 100
	ctx := context.Background()
	cfg := rest.CopyConfig(restConfig)
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	// The controller gets the binary's default client rate limits (--kube-api-qps/--kube-api-burst).
	mgrCfg := rest.CopyConfig(restConfig)
	mgrCfg.QPS, mgrCfg.Burst = DefaultQPS, DefaultBurst
	startNetpolWith(t, mgrCfg, ModeEnforce)
	ns := namespace(t)

	for i := 0; i < cards; i++ {
		deployment(t, c, ns, fmt.Sprintf("agent-%04d", i))
	}
	start := time.Now()
	parallel(cards, 16, func(i int) {
		agentCard(t, c, ns, fmt.Sprintf("agent-%04d-card", i), targetSpec("Deployment", fmt.Sprintf("agent-%04d", i)))
	})
	created := time.Since(start)
	eventuallyWithin(t, 10*time.Minute, "all policies", func() (bool, string) {
		var list networkingv1.NetworkPolicyList
		_ = c.List(ctx, &list, client.InNamespace(ns))
		return len(list.Items) == cards, fmt.Sprintf("%d/%d", len(list.Items), cards)
	})
	all := time.Since(start)
	t.Logf("client rate limit of the controller: %v QPS, burst %d", DefaultQPS, DefaultBurst)
	t.Logf("%d AgentCards: created in %v, all %d NetworkPolicies exist after %v (%.0f policies/s)", cards, created.Round(time.Millisecond), cards, all.Round(time.Millisecond), float64(cards)/all.Seconds())

	// Let the controller settle: every card reports NetworkPolicyReady.
	eventuallyWithin(t, 10*time.Minute, "all conditions", func() (bool, string) {
		list := view.NewAgentCardList()
		_ = c.List(ctx, list, client.InNamespace(ns))
		n := 0
		for i := range list.Items {
			if card, err := view.FromUnstructured(&list.Items[i]); err == nil && card.Condition(api.ConditionNetworkPolicyReady) != nil {
				n++
			}
		}
		return n == cards, fmt.Sprintf("%d/%d", n, cards)
	})
	t.Logf("all %d NetworkPolicyReady conditions reported after %v", cards, time.Since(start).Round(time.Millisecond))

	// Flip latency: status apply → the policy reads permissive (polled every 5 ms).
	latencies := make([]time.Duration, 0, flips)
	for i := 0; i < flips; i++ {
		name := fmt.Sprintf("agent-%04d", i)
		t0 := time.Now()
		playAgentcard(t, c, ns, name+"-card", true)
		key := client.ObjectKey{Namespace: ns, Name: name + "-agent-policy"}
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			np := &networkingv1.NetworkPolicy{}
			if err := c.Get(ctx, key, np); err != nil {
				return false, nil
			}
			return np.Annotations[resources.PolicyKindAnnotation] == resources.Permissive, nil
		})
		require.NoError(t, err, "flip %d", i)
		latencies = append(latencies, time.Since(t0))
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("%d flips: flip→policy p50 %v, p99 %v, max %v", flips, latencies[flips/2].Round(time.Microsecond),
		latencies[flips*99/100-1].Round(time.Microsecond), latencies[flips-1].Round(time.Microsecond))
	t.Logf("process (controller + test client, %d cards/deployments/policies cached): VmRSS %s, Go heap in use %d MiB",
		cards, vmRSS(), ms.HeapInuse>>20)
}

func parallel(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

func vmRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "n/a"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
		}
	}
	return "n/a"
}
