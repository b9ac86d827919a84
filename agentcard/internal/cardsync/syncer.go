// Package cardsync keeps the cards an AgentCard's pods serve: it fetches each serving pod's card
// (conditionally, with the ETag of its last answer), parses it once per distinct body, holds it
// between syncs within a byte budget, verifies it once per card and trust bundle and binds it to
// each pod's identity (package verify), and reports each pod's result for the status (package
// status) and its label (package podlabels).
package cardsync

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/podcache"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/status"
	"github.com/kagenti/platform/agentcard/internal/verify"
)

// Syncer syncs the pods of AgentCards. Safe for concurrent use by syncs of different AgentCards.
type Syncer struct {
	Fetcher *fetch.Fetcher
	Trust   *verify.TrustStore
	// Identities says which identities an AgentCard may bind.
	Identities signature.IdentityRules
	// TrustDomain is the default of spec.identityBinding.trustDomain.
	TrustDomain string

	// cards holds the pods' cards between syncs within a byte budget.
	cards *store
	// parsing shares one parse among the pods fetching the same body at once.
	parsing singleflight.Group
}

// NewSyncer returns a Syncer that keeps at most maxCachedCardBytes of cards between syncs.
func NewSyncer(fetcher *fetch.Fetcher, trust *verify.TrustStore, identities signature.IdentityRules, trustDomain string, maxCachedCardBytes int) *Syncer {
	return &Syncer{Fetcher: fetcher, Trust: trust, Identities: identities, TrustDomain: trustDomain, cards: newStore(maxCachedCardBytes)}
}

// CachedBytes returns the bytes of cards held between syncs.
func (r *Syncer) CachedBytes() int {
	return r.cards.size()
}

// NewCardPods returns the empty sync state of one AgentCard's pods.
func NewCardPods() *CardPods {
	return &CardPods{pods: map[string]*PodState{}}
}

// Served pairs a serving pod with its sync state.
type Served struct {
	Pod   *podcache.Pod
	State *PodState
}

// Sync fetches every serving pod of c in parallel (the fetcher bounds global concurrency) and
// drops the state of pods that are gone. requireSig is the AgentCard's (spec.requireSignature or
// the controller's default).
func (r *Syncer) Sync(ctx context.Context, c *v1alpha1.AgentCard, cs *CardPods, pods []*podcache.Pod, requireSig bool) []Served {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	td, spiffeID := r.TrustDomain, ""
	if b := c.Spec.IdentityBinding; b != nil {
		if b.TrustDomain != "" {
			td = b.TrustDomain
		}
		spiffeID = b.SpiffeID
	}
	keep := make(map[string]bool, len(pods))
	out := make([]Served, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		keep[p.Name] = true
		st, ok := cs.pods[p.Name]
		if !ok {
			st = &PodState{}
			cs.pods[p.Name] = st
		}
		out[i] = Served{Pod: p, State: st}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.syncPod(ctx, st, syncInput{card: c, pod: p, trustDomain: td, requireSig: requireSig, expectedIDSpec: spiffeID})
		}()
	}
	wg.Wait()
	for name, st := range cs.pods {
		if !keep[name] {
			r.dropCard(st)
			delete(cs.pods, name)
		}
	}
	return out
}

// Reset forgets every pod of cs, releasing their cards from the store.
func (r *Syncer) Reset(cs *CardPods) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, st := range cs.pods {
		if st.card != nil {
			r.cards.release(st.card.heldKey)
		}
	}
	cs.pods = map[string]*PodState{}
}

// ReleaseTransient drops the card bytes of this sync that the store does not hold.
func (cs *CardPods) ReleaseTransient() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, st := range cs.pods {
		st.releaseTransient()
	}
}

// firstFetchRetry and maxFetchRetries bound the quick retries of a failed fetch: 1 s, 2 s, 4 s,
// 8 s, each at most a quarter of the sync period, then the sync period. A pod whose card server
// was not up yet when it became ready (or that failed once) gets its card seconds after it
// answers instead of a whole period later; one that keeps failing costs a few fetches more, not a
// fetch a second.
const (
	firstFetchRetry = time.Second
	maxFetchRetries = 4
)

// FetchFailed says whether a sync reported a fetch failure a retry may cure: no answer, a refused
// connection, an HTTP error. An invalid or too large card, and a miss absorbed by
// failureThreshold (the pod keeps its card), wait for the next sync.
func FetchFailed(served []Served) bool {
	for _, sp := range served {
		if sp.State.fetchStatus == v1alpha1.FetchFailed && sp.State.reason == v1alpha1.ReasonFetchFailed {
			return true
		}
	}
	return false
}

// NextRetry returns the delay of the next quick retry after a sync whose fetches failed (or
// false: none, after a sync without failure or once the retries are spent). A sync without a
// failure starts the count again.
func (cs *CardPods) NextRetry(failed bool, period time.Duration) (time.Duration, bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !failed {
		cs.retries = 0
		return 0, false
	}
	if cs.retries >= maxFetchRetries {
		return 0, false
	}
	d := firstFetchRetry << cs.retries
	if d > period/4 {
		return 0, false
	}
	cs.retries++
	return d, true
}

// Results are the sync results the status is built from (status.Build).
func Results(served []Served) []status.PodResult {
	out := make([]status.PodResult, len(served))
	for i, sp := range served {
		s := sp.State
		out[i] = status.PodResult{
			PodName: sp.Pod.Name, PodIP: sp.Pod.IP, URL: s.url, Over: s.over, PeerID: s.peerID, FetchStatus: s.fetchStatus, Reason: s.reason, Error: s.errMsg,
			Verify: s.verify, Binding: s.binding, ChangedAt: s.changedAt, CreatedAt: s.createdAt,
		}
		if c := s.card; c != nil {
			out[i].Card = &status.Card{Hash: c.hash, Name: c.name, Version: c.version, Status: c.status}
		}
	}
	return out
}
