package cardsync

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"

	"github.com/kagenti/platform/agentcard/internal/intern"
	"github.com/kagenti/platform/agentcard/internal/signature"
)

// DefaultMaxCachedCardBytes is the default of --max-cached-card-bytes.
const DefaultMaxCachedCardBytes = 32 << 20

// store holds the cards the controller keeps between syncs (so that a 304 Not Modified costs
// nothing), once per distinct body however many pods serve it, within a byte budget. An entry is
// what the parse of the body gave (its summary and the bytes status.card carries), so pods serving
// bytes already held cost a hash of the body, not a parse. A card that does not fit is used for the
// sync that fetched it and then dropped, with its pod's ETag: the next fetch of that pod is
// unconditional. Memory for cards is thus bounded by the budget, whatever the number of pods or
// AgentCards. Safe for concurrent use.
type store struct {
	mu      sync.Mutex
	limit   int
	used    int
	entries map[string]*storedCard
	// parses and verifications count the card parses and signature verifications run (the tests
	// read them).
	parses, verifications int
}

type storedCard struct {
	// card is shared by every pod serving the body, and never modified.
	card *cardSummary
	refs int
	// verifiedUnder is the trust bundle (its hash) verify was computed under: every pod serving
	// this card shares the one signature verification (binding to each pod's identity is per pod).
	verifiedUnder *string
	verify        signature.Result
}

func newStore(limit int) *store {
	return &store{limit: limit, entries: map[string]*storedCard{}}
}

// bodyKey is the key of a served body in the store.
func bodyKey(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// lookup returns the held card parsed from the body with key, taking a reference to it.
func (s *store) lookup(key string) (*cardSummary, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return nil, false
	}
	e.refs++
	return e.card, true
}

// hold keeps c, parsed from the body with key (or finds the card already kept for it), and returns
// the shared copy with heldKey set; ok is false when the budget has no room for c.status.
func (s *store) hold(key string, c *cardSummary) (shared *cardSummary, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, found := s.entries[key]; found {
		e.refs++
		return e.card, true
	}
	if s.used+len(c.status) > s.limit {
		return nil, false
	}
	held := *c
	held.heldKey = key
	// The cached AgentCards serving this card hold the same bytes in status.card: one copy.
	held.status = intern.Bytes(c.status)
	s.entries[key] = &storedCard{card: &held, refs: 1}
	s.used += len(held.status)
	return &held, true
}

// countParse counts a card parse.
func (s *store) countParse() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parses++
}

// release drops one reference to key ("" is a no-op).
func (s *store) release(key string) {
	if key == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return
	}
	if e.refs--; e.refs <= 0 {
		s.used -= len(e.card.status)
		delete(s.entries, key)
	}
}

// verification returns the signature verification of the held card key under the bundle with
// hash bundle, calling verify only when no pod serving the same card has had it computed under
// that bundle yet. A card the store does not hold (key "") is verified each time; a verify that
// reports !ok (it could not run) is not kept.
func (s *store) verification(key, bundle string, verify func() (signature.Result, bool)) signature.Result {
	if key == "" {
		v, _ := verify()
		s.mu.Lock()
		s.verifications++
		s.mu.Unlock()
		return v
	}
	s.mu.Lock()
	e, ok := s.entries[key]
	if ok && e.verifiedUnder != nil && *e.verifiedUnder == bundle {
		v := e.verify
		s.mu.Unlock()
		return v
	}
	s.mu.Unlock()
	v, done := verify() // outside the lock: verifications of different cards run in parallel
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verifications++
	if !done {
		return v
	}
	if e, ok := s.entries[key]; ok {
		e.verifiedUnder, e.verify = &bundle, v
	}
	return v
}

// size returns the bytes held.
func (s *store) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}
