package hub_test

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/federation/fedtest"
	"github.com/kagenti/platform/agentcard/internal/federation/hub"
	"github.com/kagenti/platform/agentcard/internal/federation/tlsid"
	"github.com/kagenti/platform/agentcard/internal/federation/wire"
)

type world struct {
	clock     *clocktesting.FakeClock
	hubDomain *fedtest.Domain
	a, b      *fedtest.Domain
	hub       *fedtest.Hub
}

func newWorld(t *testing.T) *world {
	w := &world{clock: clocktesting.NewFakeClock(time.Now()), hubDomain: fedtest.NewDomain(t, "hub.example"),
		a: fedtest.NewDomain(t, "a.example"), b: fedtest.NewDomain(t, "b.example")}
	h := fedtest.NewHub(w.clock, fedtest.Registration("a", w.a, 30*time.Second, 5*time.Minute), fedtest.Registration("b", w.b, 30*time.Second, 5*time.Minute))
	w.hub = fedtest.StartHub(t, w.hubDomain, h)
	return w
}

func (w *world) member(t *testing.T, name string, d *fedtest.Domain) *fedtest.Member {
	return fedtest.NewMember(t, name, d, w.hubDomain, w.hub.Address)
}

func (w *world) served(cluster, ns, name string) bool {
	_, ok := w.hub.Store.RemoteCard(cluster, ns, name)
	return ok
}

func (w *world) refusal(cluster, ns, name string) *v1alpha1.FederationRefusal {
	for _, r := range w.hub.Store.Status(cluster).Refusals {
		if r.Namespace == ns && r.Name == name {
			return &r
		}
	}
	return nil
}

func TestExportedCardIsServedWithItsClusterAndChangesPropagate(t *testing.T) {
	w := newWorld(t)
	a := w.member(t, "a", w.a)
	a.Run(t)
	card, id := w.a.SignedCard(t, "agents", "weather", "Weather", "1.0.0")
	a.Log.Put("agents", "weather", card, id, time.Now())
	fedtest.Eventually(t, "the card served under cluster a", func() bool { return w.served("a", "agents", "weather") })
	rc, _ := w.hub.Store.RemoteCard("a", "agents", "weather")
	require.Equal(t, "a", rc.Cluster)
	require.Equal(t, id, rc.SpiffeID, "the signer is what the hub verified")
	require.False(t, rc.VerifiedAt.IsZero(), "the hub's own verification time")
	require.False(t, w.served("b", "agents", "weather"))

	v2, _ := w.a.SignedCard(t, "agents", "weather", "Weather", "2.0.0")
	a.Log.Put("agents", "weather", v2, id, time.Now())
	fedtest.Eventually(t, "version 2 served", func() bool {
		rc, _ := w.hub.Store.RemoteCard("a", "agents", "weather")
		return strings.Contains(string(rc.Card), `"2.0.0"`)
	})
	a.Log.Remove("agents", "weather")
	fedtest.Eventually(t, "the withdrawn card gone", func() bool { return !w.served("a", "agents", "weather") })
}

func TestCardSignedOutsideTheMembersTrustDomainIsRefused(t *testing.T) {
	w := newWorld(t)
	a := w.member(t, "a", w.a)
	a.Run(t)
	evil := fedtest.NewDomain(t, "evil.example")
	card, id := evil.SignedCard(t, "agents", "weather", "Weather", "1.0.0")
	a.Log.Put("agents", "weather", card, id, time.Now())
	fedtest.Eventually(t, "a refusal", func() bool { return w.refusal("a", "agents", "weather") != nil })
	r := w.refusal("a", "agents", "weather")
	require.Equal(t, v1alpha1.ReasonSignerOutsideTrustDomain, r.Reason)
	require.Contains(t, r.Message, "spiffe://evil.example/ns/agents/sa/weather")
	require.False(t, w.served("a", "agents", "weather"))
}

func TestMemberCannotPublishAnotherClustersAgents(t *testing.T) {
	w := newWorld(t)
	a, b := w.member(t, "a", w.a), w.member(t, "b", w.b)
	a.Run(t)
	b.Run(t)
	card, id := w.a.SignedCard(t, "agents", "weather", "Weather", "1.0.0")
	a.Log.Put("agents", "weather", card, id, time.Now())
	// b replays a's signed card, and names a's identity as the one it bound.
	b.Log.Put("agents", "weather", card, id, time.Now())
	fedtest.Eventually(t, "b's copy refused", func() bool { return w.refusal("b", "agents", "weather") != nil })
	require.Equal(t, v1alpha1.ReasonSignerOutsideTrustDomain, w.refusal("b", "agents", "weather").Reason)
	fedtest.Eventually(t, "a's card served", func() bool { return w.served("a", "agents", "weather") })
	require.False(t, w.served("b", "agents", "weather"))
}

func TestCardOfAnotherNamespaceIsRefused(t *testing.T) {
	w := newWorld(t)
	a := w.member(t, "a", w.a)
	a.Run(t)
	card, id := w.a.SignedCard(t, "payments", "billing", "Billing", "1.0.0")
	a.Log.Put("agents", "billing", card, id, time.Now())
	fedtest.Eventually(t, "a refusal", func() bool { return w.refusal("a", "agents", "billing") != nil })
	require.Equal(t, v1alpha1.ReasonNamespaceNotOwned, w.refusal("a", "agents", "billing").Reason)
	mine, myID := w.a.SignedCard(t, "agents", "weather", "Weather", "1.0.0")
	a.Log.Put("agents", "weather", mine, "spiffe://a.example/ns/agents/sa/other", time.Now())
	fedtest.Eventually(t, "a refusal", func() bool { return w.refusal("a", "agents", "weather") != nil })
	require.Equal(t, v1alpha1.ReasonIdentityNotClaimed, w.refusal("a", "agents", "weather").Reason)
	a.Log.Put("agents", "weather", mine, myID, time.Now())
	fedtest.Eventually(t, "served once claimed right", func() bool { return w.served("a", "agents", "weather") })
	require.Equal(t, 1, w.hub.Store.Status("a").Refused)
}

func TestSilentMemberGoesStaleAfterTTLAndIsWithdrawnAfterGrace(t *testing.T) {
	w := newWorld(t)
	a := w.member(t, "a", w.a)
	stop := a.Run(t)
	card, id := w.a.SignedCard(t, "agents", "weather", "Weather", "1.0.0")
	a.Log.Put("agents", "weather", card, id, time.Now())
	fedtest.Eventually(t, "served", func() bool { return w.served("a", "agents", "weather") })
	stop()
	fedtest.Eventually(t, "disconnected", func() bool { return !w.hub.Store.Status("a").Connected })

	w.clock.Step(29 * time.Second)
	w.hub.Store.Sweep(w.hub.Registry)
	rc, _ := w.hub.Store.RemoteCard("a", "agents", "weather")
	require.False(t, rc.Stale, "within the TTL a disconnected member's cards are fresh")

	w.clock.Step(2 * time.Second)
	w.hub.Store.Sweep(w.hub.Registry)
	rc, ok := w.hub.Store.RemoteCard("a", "agents", "weather")
	require.True(t, ok)
	require.True(t, rc.Stale, "past the TTL the card is served stale")
	require.True(t, w.hub.Store.Status("a").Stale)

	w.clock.Step(5 * time.Minute)
	w.hub.Store.Sweep(w.hub.Registry)
	require.False(t, w.served("a", "agents", "weather"), "past the grace period the card is withdrawn")
	require.True(t, w.hub.Store.Status("a").Withdrawn)
}

func TestReconnectWithNothingChangedSendsNoCards(t *testing.T) {
	w := newWorld(t)
	a := w.member(t, "a", w.a)
	// One card signed once, published under 1,000 names: signing is not what this test measures.
	card, id := w.a.SignedCard(t, "agents", "sa", "Agent", "1.0.0")
	for i := range 1000 {
		a.Log.Put("agents", "agent-"+itoa(i), card, id, time.Now())
	}
	a.Run(t)
	fedtest.EventuallyWithin(t, 3*time.Minute, "1000 cards acknowledged", func() bool { return a.Acked.Load() == a.Log.Head() && w.hub.Store.Status("a").Cards == 1000 })
	before := a.Written.Load()
	w.hub.Disconnect("a")
	fedtest.Eventually(t, "a second session acknowledged", func() bool { return a.Sessions.Load() == 2 })
	fedtest.Eventually(t, "connected again", func() bool { return w.hub.Store.Status("a").Connected })
	sent := a.Written.Load() - before
	t.Logf("reconnect with 1000 unchanged cards: %d bytes written by the member", sent)
	require.Less(t, sent, int64(1024), "a resumed stream sends no card")
	require.Equal(t, 1000, w.hub.Store.Status("a").Cards)
}

func TestHubAndMemberRestartsLoseNothing(t *testing.T) {
	w := newWorld(t)
	a := w.member(t, "a", w.a)
	stopA := a.Run(t)
	card, id := w.a.SignedCard(t, "agents", "weather", "Weather", "1.0.0")
	a.Log.Put("agents", "weather", card, id, time.Now())
	old, oldID := w.a.SignedCard(t, "agents", "old", "Old", "1.0.0")
	a.Log.Put("agents", "old", old, oldID, time.Now())
	fedtest.Eventually(t, "served", func() bool { return w.served("a", "agents", "weather") && w.served("a", "agents", "old") })

	// The hub restarts: a new process, an empty store, the same address.
	addr := w.hub.Address
	w.hub.Stop()
	h2 := fedtest.NewHub(w.clock, fedtest.Registration("a", w.a, 30*time.Second, 5*time.Minute))
	ln := listenOn(t, addr)
	src := tlsid.NewStatic(w.hubDomain.SVID(t, "/ns/kagenti-system/sa/kagenti-agentcard-hub", time.Time{}))
	srv := h2.NewGRPCServer(tlsid.ServerConfig(src, h2.Registry, h2.RejectedCertificate))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	fedtest.Eventually(t, "the new hub has a's cards", func() bool {
		_, ok1 := h2.Store.RemoteCard("a", "agents", "weather")
		_, ok2 := h2.Store.RemoteCard("a", "agents", "old")
		return ok1 && ok2
	})

	// The member restarts (a new epoch); a card withdrawn while it was down is dropped by the
	// full resync.
	stopA()
	a.Log.Remove("agents", "old")
	a.Run(t)
	fedtest.Eventually(t, "the old card dropped, the other kept", func() bool {
		_, ok1 := h2.Store.RemoteCard("a", "agents", "weather")
		_, ok2 := h2.Store.RemoteCard("a", "agents", "old")
		return ok1 && !ok2
	})
}

func TestRotatedCertificateKeepsTheStream(t *testing.T) {
	w := newWorld(t)
	a := w.member(t, "a", w.a)
	a.Run(t)
	card, id := w.a.SignedCard(t, "agents", "weather", "Weather", "1.0.0")
	a.Log.Put("agents", "weather", card, id, time.Now())
	fedtest.Eventually(t, "served", func() bool { return w.served("a", "agents", "weather") })
	a.SVID.Set(w.a.SVID(t, fedtest.AgentPath, time.Now().Add(2*time.Hour)))
	v2, _ := w.a.SignedCard(t, "agents", "weather", "Weather", "2.0.0")
	a.Log.Put("agents", "weather", v2, id, time.Now())
	fedtest.Eventually(t, "version 2 served", func() bool {
		rc, _ := w.hub.Store.RemoteCard("a", "agents", "weather")
		return strings.Contains(string(rc.Card), `"2.0.0"`)
	})
	require.EqualValues(t, 1, w.hub.Accepted.Load(), "the rotation opened no new stream")
	require.EqualValues(t, 1, a.Sessions.Load())
}

func TestStreamEndsWhenItsCertificateExpiresAndResumesWithTheRotatedOne(t *testing.T) {
	w := newWorld(t)
	a := w.member(t, "a", w.a)
	a.SVID.Set(w.a.SVID(t, fedtest.AgentPath, time.Now().Add(1500*time.Millisecond)))
	a.Run(t)
	fedtest.Eventually(t, "connected", func() bool { return w.hub.Accepted.Load() == 1 })
	a.SVID.Set(w.a.SVID(t, fedtest.AgentPath, time.Now().Add(time.Hour)))
	fedtest.Eventually(t, "a second stream after the first certificate expired", func() bool { return w.hub.Accepted.Load() == 2 })
}

func TestExpiredCertificateIsRefusedWithAReason(t *testing.T) {
	w := newWorld(t)
	a := w.member(t, "a", w.a)
	a.SVID.Set(w.a.SVID(t, fedtest.AgentPath, time.Now().Add(-time.Minute)))
	a.Run(t)
	fedtest.Eventually(t, "refused", func() bool { return w.hub.Store.Status("a").ConnReason == v1alpha1.ReasonCertificateExpired })
	require.Contains(t, w.hub.Store.Status("a").ConnMessage, "spiffe://a.example"+fedtest.AgentPath)
	require.Zero(t, w.hub.Accepted.Load())
}

func TestUnknownClusterIsRefused(t *testing.T) {
	t.Run("another identity of a registered trust domain", func(t *testing.T) {
		w := newWorld(t)
		a := w.member(t, "a", w.a)
		a.SVID.Set(w.a.SVID(t, "/ns/agents/sa/weather", time.Time{}))
		a.Run(t)
		fedtest.Eventually(t, "refused", func() bool { return w.hub.Store.Status("a").ConnReason == v1alpha1.ReasonUnknownCluster })
		require.Contains(t, w.hub.Store.Status("a").ConnMessage, "is not the member agent identity")
	})
	t.Run("a member naming another cluster", func(t *testing.T) {
		w := newWorld(t)
		a := w.member(t, "b", w.a)
		a.Run(t)
		fedtest.Eventually(t, "refused", func() bool { return w.hub.Store.Status("a").ConnReason == v1alpha1.ReasonUnknownCluster })
		require.False(t, w.hub.Store.Status("b").Known, "b's status is untouched")
	})
	t.Run("an unregistered trust domain", func(t *testing.T) {
		w := newWorld(t)
		stranger := fedtest.NewDomain(t, "stranger.example")
		m := w.member(t, "stranger", stranger)
		m.Run(t)
		b := w.member(t, "b", w.b)
		b.Run(t)
		fedtest.Eventually(t, "b connected", func() bool { return w.hub.Store.Status("b").Connected })
		require.False(t, w.hub.Store.Status("stranger").Known)
		require.Zero(t, m.Sessions.Load())
	})
}

// rawCodec sends bytes as they are, to put frames on the wire that the JSON codec never would.
type rawCodec struct{}

func (rawCodec) Name() string                    { return "json" }
func (rawCodec) Marshal(v any) ([]byte, error)   { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func rawStream(t *testing.T, w *world, d *fedtest.Domain) grpc.ClientStream {
	hubID := spiffeid.RequireFromPath(w.hubDomain.TD, "/ns/kagenti-system/sa/kagenti-agentcard-hub")
	cfg := tlsid.ClientConfig(tlsid.NewStatic(d.SVID(t, fedtest.AgentPath, time.Time{})), w.hubDomain.Bundle(t).X509, hubID)
	conn, err := grpc.NewClient("passthrough:///"+w.hub.Address, grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallSendMsgSize(8<<20)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	s, err := conn.NewStream(context.Background(), &wire.ServiceDesc.Streams[0], wire.StreamMethod)
	require.NoError(t, err)
	return s
}

func hello(cluster string) []byte {
	b, _ := json.Marshal(wire.MemberFrame{Hello: &wire.Hello{Version: wire.ProtocolVersion, Cluster: cluster, Epoch: "e1"}})
	return b
}

func TestBadInputIsRefusedWithAReasonAndAffectsNoOtherMember(t *testing.T) {
	cases := []struct {
		name   string
		frames func(t *testing.T, w *world) [][]byte
		reason string
	}{
		{"oversized frame", func(t *testing.T, w *world) [][]byte {
			big, _ := json.Marshal(wire.MemberFrame{Upsert: &wire.Upsert{Revision: 1, Namespace: "agents", Name: "x",
				Card: json.RawMessage(`"` + strings.Repeat("x", hub.DefaultMaxFrameBytes) + `"`)}})
			return [][]byte{hello("a"), big}
		}, v1alpha1.ReasonFrameTooLarge},
		{"malformed frame", func(t *testing.T, w *world) [][]byte {
			return [][]byte{hello("a"), []byte(`{"upsert": [not json`)}
		}, v1alpha1.ReasonMalformedFrame},
		{"a frame with two messages", func(t *testing.T, w *world) [][]byte {
			return [][]byte{hello("a"), []byte(`{"heartbeat":{},"flush":{"rev":1}}`)}
		}, v1alpha1.ReasonMalformedFrame},
		{"no hello first", func(t *testing.T, w *world) [][]byte {
			return [][]byte{[]byte(`{"heartbeat":{}}`)}
		}, v1alpha1.ReasonMalformedFrame},
		{"flood", func(t *testing.T, w *world) [][]byte {
			w.hub.FrameRate, w.hub.FrameBurst = 1, 5
			out := [][]byte{hello("a")}
			for range 50 {
				out = append(out, []byte(`{"heartbeat":{}}`))
			}
			return out
		}, v1alpha1.ReasonRateLimited},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			b := w.member(t, "b", w.b)
			b.Run(t)
			card, id := w.b.SignedCard(t, "agents", "weather", "Weather", "1.0.0")
			b.Log.Put("agents", "weather", card, id, time.Now())
			fedtest.Eventually(t, "b served", func() bool { return w.served("b", "agents", "weather") })

			s := rawStream(t, w, w.a)
			for _, f := range tc.frames(t, w) {
				if err := s.SendMsg(f); err != nil {
					break
				}
			}
			fedtest.Eventually(t, "a refused with "+tc.reason, func() bool { return w.hub.Store.Status("a").ConnReason == tc.reason })
			require.True(t, w.hub.Store.Status("b").Connected, "b is unaffected")
			require.True(t, w.served("b", "agents", "weather"))
		})
	}
}

func listenOn(t *testing.T, addr string) net.Listener {
	var ln net.Listener
	fedtest.Eventually(t, "listening on "+addr, func() bool {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err == nil
	})
	return ln
}

func itoa(i int) string {
	return strings.TrimSpace(strings.Replace(time.Duration(i).String(), "ns", "", 1))
}
