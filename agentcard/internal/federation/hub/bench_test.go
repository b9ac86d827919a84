package hub_test

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	cardpkg "github.com/kagenti/platform/agentcard/internal/card"
	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/federation/fedtest"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

// BenchmarkTenMembersThousandCards measures the hub against 10 member agents of 1,000 cards each,
// in one process over real mutual TLS on loopback: the first sync once the members connect, the
// propagation of single changes, the bytes a reconnect with nothing changed sends, and the heap.
// Run with -benchtime=1x.
func BenchmarkTenMembersThousandCards(b *testing.B) {
	const members, cards = 10, 1000
	for range b.N {
		hubDomain := fedtest.NewDomain(b, "hub.example")
		domains := make([]*fedtest.Domain, members)
		regs := make([]v1alpha1.FederatedCluster, members)
		for i := range members {
			domains[i] = fedtest.NewDomain(b, fmt.Sprintf("m%d.example", i))
			regs[i] = fedtest.Registration(fmt.Sprintf("m%d", i), domains[i], 30*time.Second, 5*time.Minute)
		}
		h := fedtest.StartHub(b, hubDomain, fedtest.NewHub(clock.RealClock{}, regs...))
		ms := make([]*fedtest.Member, members)
		signers := make([]*devca.SVID, members)
		var memberHeap uint64
		for i, d := range domains {
			ms[i] = fedtest.NewMember(b, regs[i].Name, d, hubDomain, h.Address)
			s, err := d.CA.NewSVID("spiffe://"+d.TD.Name()+"/ns/agents/sa/agent", devca.SVIDOptions{})
			if err != nil {
				b.Fatal(err)
			}
			signers[i] = s
			before := heap()
			for j := range cards {
				card, err := signature.Sign(testcards.Named(fmt.Sprintf("agent-%d", j), "1.0.0"), signature.SignOptions{Key: s.Key, Chain: s.Chain})
				if err != nil {
					b.Fatal(err)
				}
				ms[i].Log.Put("agents", fmt.Sprintf("agent-%d", j), card, "spiffe://"+d.TD.Name()+"/ns/agents/sa/agent", time.Now())
			}
			if i == 0 {
				memberHeap = heap() - before
			}
		}
		base := heap()
		start := time.Now()
		for _, m := range ms {
			m.Run(b)
		}
		for _, m := range ms {
			fedtest.EventuallyWithin(b, 3*time.Minute, "first sync", func() bool { return h.Store.Status(m.Cluster).Cards == cards })
		}
		firstSync := time.Since(start)
		hubHeap := heap() - base

		var lat []time.Duration
		for k := range 200 {
			m, s := ms[k%members], signers[k%members]
			name := fmt.Sprintf("agent-%d", k)
			card, _ := signature.Sign(testcards.Named(name, fmt.Sprintf("2.0.%d", k)), signature.SignOptions{Key: s.Key, Chain: s.Chain})
			parsed, err := cardpkg.Parse(card)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			m.Log.Put("agents", name, card, "spiffe://"+m.Agent.Cluster+".example/ns/agents/sa/agent", time.Now())
			for {
				if rc, ok := h.Store.RemoteCard(m.Cluster, "agents", name); ok && rc.CardHash == parsed.Hash {
					break
				}
				if time.Since(t0) > 20*time.Second {
					b.Fatalf("change %d of %s not served: %+v", k, m.Cluster, h.Store.Status(m.Cluster))
				}
				time.Sleep(100 * time.Microsecond)
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)

		for _, m := range ms {
			fedtest.Eventually(b, "acked", func() bool { return m.Acked.Load() == m.Log.Head() })
		}
		written := make([]int64, members)
		for i, m := range ms {
			written[i] = m.Written.Load()
			h.Disconnect(m.Cluster)
		}
		var resent int64
		for i, m := range ms {
			fedtest.Eventually(b, "resumed", func() bool { return m.Sessions.Load() == 2 && h.Store.Status(m.Cluster).Connected })
			resent += m.Written.Load() - written[i]
		}
		b.ReportMetric(firstSync.Seconds(), "first-sync-s")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "propagation-p99-ms")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "propagation-p50-ms")
		b.ReportMetric(float64(resent)/members, "reconnect-bytes/1000-cards")
		b.ReportMetric(float64(hubHeap)/(1<<20), "hub-heap-MiB")
		b.ReportMetric(float64(memberHeap)/(1<<20), "member-log-heap-MiB")
	}
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
