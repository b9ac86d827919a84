package hub

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/discovery"
	"github.com/kagenti/platform/agentcard/internal/federation/wire"
)

// MaxRefusalsInStatus bounds status.refusals.
const MaxRefusalsInStatus = 20

type cardKey struct{ namespace, name string }

// entry is one accepted card: its bytes as the member sent them and what the hub established.
type entry struct {
	card       []byte
	hash       string
	signer     string
	bundleHash string
	memberAt   time.Time
	verifiedAt time.Time
}

// member is what the hub holds of one member cluster.
type member struct {
	epoch    string
	revision int64
	cards    map[cardKey]*entry
	refused  map[cardKey]Refusal
	// seen collects the keys a full resync carried, to drop the others at its Flush.
	seen map[cardKey]bool

	lastSeen  time.Time
	streams   int
	peerID    string
	clusterID string
	// connReason/connMessage: why the last stream or handshake was refused or ended.
	connReason, connMessage string
	stale, withdrawn        bool
}

// Store is the hub's catalogue of federated cards, in memory on the leader. It is rebuilt from the
// members after a restart (each member resends what the hub lacks).
type Store struct {
	Clock clock.PassiveClock

	serving atomic.Bool

	mu      sync.RWMutex
	members map[string]*member
	// changed is signalled (non-blocking) when a member's state changes, for the status writer.
	changed chan struct{}
}

// NewStore returns an empty store.
func NewStore(c clock.PassiveClock) *Store {
	return &Store{Clock: c, members: map[string]*member{}, changed: make(chan struct{}, 1)}
}

// Serving says whether this replica holds the member streams (it is the leader and serves).
func (s *Store) Serving() bool { return s.serving.Load() }

// SetServing marks the replica as holding the member streams, or not.
func (s *Store) SetServing(v bool) { s.serving.Store(v) }

// Changed is signalled after a change a status write should report.
func (s *Store) Changed() <-chan struct{} { return s.changed }

func (s *Store) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *Store) member(name string) *member {
	m := s.members[name]
	if m == nil {
		m = &member{cards: map[cardKey]*entry{}, refused: map[cardKey]Refusal{}}
		s.members[name] = m
	}
	return m
}

// Open records an authenticated stream of a member and returns the revision it resumes from: the
// one held for epoch, or 0 (send everything) for another epoch, after which the previous cards stay
// served until the full resync's Flush replaces them.
func (s *Store) Open(name, epoch, peerID, clusterID string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.member(name)
	m.streams++
	m.peerID, m.clusterID = peerID, clusterID
	m.connReason, m.connMessage = v1alpha1.ReasonStreamOpen, "the member agent "+peerID+" is connected"
	m.lastSeen = s.Clock.Now()
	m.stale, m.withdrawn = false, false
	defer s.notify()
	if m.epoch == epoch && m.epoch != "" {
		return m.revision
	}
	m.epoch, m.revision, m.seen = epoch, 0, map[cardKey]bool{}
	return 0
}

// Close records the end of a stream and why.
func (s *Store) Close(name, reason, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.member(name)
	m.streams = max(0, m.streams-1)
	if m.streams == 0 {
		m.connReason, m.connMessage = reason, message
	}
	s.notify()
}

// Refuse records a refused connection of a member (no stream was opened).
func (s *Store) Refuse(name, reason, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.member(name)
	if m.streams == 0 {
		m.connReason, m.connMessage = reason, message
	}
	s.notify()
}

// Upsert verifies u against reg and keeps or refuses it. A card identical to the one held (same
// bytes, same trust bundle) is not verified again.
func (s *Store) Upsert(reg Registration, u *wire.Upsert) *Refusal {
	now := s.Clock.Now()
	k := cardKey{u.Namespace, u.Name}
	s.mu.RLock()
	m := s.members[reg.Name]
	var held *entry
	if m != nil {
		held = m.cards[k]
	}
	s.mu.RUnlock()
	var e *entry
	var ref *Refusal
	if held != nil && held.bundleHash == reg.Bundle.Hash && string(held.card) == string(u.Card) && held.signer == u.SpiffeID {
		e = &entry{card: held.card, hash: held.hash, signer: held.signer, bundleHash: held.bundleHash, memberAt: u.VerifiedAt, verifiedAt: held.verifiedAt}
	} else if v, r := VerifyCard(reg, u, now); r != nil {
		ref = r
	} else {
		e = &entry{card: v.Card.Raw, hash: v.Card.Hash, signer: v.Signer.String(), bundleHash: reg.Bundle.Hash, memberAt: u.VerifiedAt, verifiedAt: now}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m = s.member(reg.Name)
	m.lastSeen = now
	m.revision = max(m.revision, u.Revision)
	if m.seen != nil {
		m.seen[k] = true
	}
	if e != nil && m.cards[k] == nil && len(m.cards) >= reg.MaxCards {
		ref, e = refuse(v1alpha1.ReasonTooManyCards, "the hub keeps at most %d cards of this member (spec.maxCards)", reg.MaxCards), nil
	}
	if ref != nil {
		delete(m.cards, k)
		m.refused[k] = *ref
	} else {
		m.cards[k] = e
		delete(m.refused, k)
	}
	s.notify()
	return ref
}

// Delete withdraws one card.
func (s *Store) Delete(name string, d *wire.Delete) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.member(name)
	k := cardKey{d.Namespace, d.Name}
	delete(m.cards, k)
	delete(m.refused, k)
	m.revision = max(m.revision, d.Revision)
	m.lastSeen = s.Clock.Now()
	s.notify()
}

// Flush ends a batch. The Flush of a full resync drops the cards the resync did not carry. It
// returns the number of refused cards, for the Ack.
func (s *Store) Flush(name string, f *wire.Flush) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.member(name)
	m.revision = max(m.revision, f.Revision)
	m.lastSeen = s.Clock.Now()
	if f.Full && m.seen != nil {
		maps.DeleteFunc(m.cards, func(k cardKey, _ *entry) bool { return !m.seen[k] })
		maps.DeleteFunc(m.refused, func(k cardKey, _ Refusal) bool { return !m.seen[k] })
		m.seen = nil
	}
	s.notify()
	return len(m.refused)
}

// Touch records a heartbeat.
func (s *Store) Touch(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.member(name)
	m.lastSeen = s.Clock.Now()
	if m.stale {
		m.stale = false
		s.notify()
	}
}

// Sweep ages every member: silent past its TTL its cards are stale, past its grace period they are
// withdrawn (and its epoch forgotten, so that it sends everything when it comes back). A member
// whose registration is gone or unusable is withdrawn at once.
func (s *Store) Sweep(reg *Registry) {
	now := s.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, m := range s.members {
		r, ok := reg.Get(name)
		if !ok || !r.Usable() {
			if len(m.cards) > 0 || m.epoch != "" {
				s.withdraw(m)
			}
			if !ok {
				delete(s.members, name)
			}
			continue
		}
		if m.lastSeen.IsZero() {
			continue
		}
		silent := now.Sub(m.lastSeen)
		switch {
		case silent > r.Grace && !m.withdrawn:
			s.withdraw(m)
		case silent > r.TTL && !m.stale && !m.withdrawn:
			m.stale = true
			s.notify()
		}
	}
}

func (s *Store) withdraw(m *member) {
	clear(m.cards)
	clear(m.refused)
	m.epoch, m.revision, m.seen = "", 0, nil
	m.stale, m.withdrawn = false, true
	s.notify()
}

// MemberStatus is one member's state for its FederatedCluster status.
type MemberStatus struct {
	Known                   bool
	Connected               bool
	Stale, Withdrawn        bool
	PeerID, ClusterID       string
	LastSeen                time.Time
	Cards, Refused          int
	Revision                int64
	ConnReason, ConnMessage string
	Refusals                []v1alpha1.FederationRefusal
}

// Status reports one member.
func (s *Store) Status(name string) MemberStatus {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m := s.members[name]
	if m == nil {
		return MemberStatus{}
	}
	st := MemberStatus{Known: true, Connected: m.streams > 0, Stale: m.stale, Withdrawn: m.withdrawn, PeerID: m.peerID, ClusterID: m.clusterID,
		LastSeen: m.lastSeen, Cards: len(m.cards), Refused: len(m.refused), Revision: m.revision, ConnReason: m.connReason, ConnMessage: m.connMessage}
	keys := slices.SortedFunc(maps.Keys(m.refused), func(a, b cardKey) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
	for _, k := range keys[:min(len(keys), MaxRefusalsInStatus)] {
		r := m.refused[k]
		st.Refusals = append(st.Refusals, v1alpha1.FederationRefusal{Namespace: k.namespace, Name: k.name, Reason: r.Reason, Message: r.Message})
	}
	return st
}

// RemoteCards implements discovery.RemoteCatalog: the served cards of every member (of one
// cluster when cluster is set), in one namespace when namespace is set.
func (s *Store) RemoteCards(cluster, namespace string) []discovery.RemoteCard {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []discovery.RemoteCard
	for name, m := range s.members {
		if cluster != "" && name != cluster {
			continue
		}
		for k, e := range m.cards {
			if namespace != "" && k.namespace != namespace {
				continue
			}
			out = append(out, discovery.RemoteCard{Cluster: name, Namespace: k.namespace, Name: k.name, Card: e.card, CardHash: e.hash,
				SpiffeID: e.signer, Stale: m.stale, LastSeen: m.lastSeen, VerifiedAt: e.verifiedAt, MemberVerifiedAt: e.memberAt})
		}
	}
	return out
}

// RemoteCard implements discovery.RemoteCatalog.
func (s *Store) RemoteCard(cluster, namespace, name string) (discovery.RemoteCard, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m := s.members[cluster]
	if m == nil {
		return discovery.RemoteCard{}, false
	}
	e := m.cards[cardKey{namespace, name}]
	if e == nil {
		return discovery.RemoteCard{}, false
	}
	return discovery.RemoteCard{Cluster: cluster, Namespace: namespace, Name: name, Card: e.card, CardHash: e.hash,
		SpiffeID: e.signer, Stale: m.stale, LastSeen: m.lastSeen, VerifiedAt: e.verifiedAt, MemberVerifiedAt: e.memberAt}, true
}
