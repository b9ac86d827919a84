package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"

	"github.com/kagenti/platform/agentcard/internal/signature"
)

// DefaultMaxCachedCardBytes is the default of --max-cached-card-bytes.
const DefaultMaxCachedCardBytes = 32 << 20

// cardStore holds the cards the controller keeps between syncs (so that a 304 Not Modified costs
// nothing), once per distinct card however many pods serve it, within a byte budget. A card that
// does not fit is used for the sync that fetched it and then dropped, with its pod's ETag: the
// next fetch of that pod is unconditional. Memory for cards is thus bounded by the budget, whatever
// the number of pods or AgentCards. Safe for concurrent use.
type cardStore struct {
	mu      sync.Mutex
	limit   int
	used    int
	entries map[string]*storedCard
	// verifications counts the signature verifications run (the tests read it).
	verifications int
}

type storedCard struct {
	data []byte
	refs int
	// verifiedUnder is the trust bundle (its hash) verify was computed under: every pod serving
	// this card shares the one signature verification (binding to each pod's identity is per pod).
	verifiedUnder *string
	verify        signature.Result
}

func newCardStore(limit int) *cardStore {
	return &cardStore{limit: limit, entries: map[string]*storedCard{}}
}

// hold keeps data (or finds the identical card already kept) and returns its key and the shared
// copy; ok is false when the budget has no room for it.
func (s *cardStore) hold(data []byte) (key string, shared []byte, ok bool) {
	sum := sha256.Sum256(data)
	key = hex.EncodeToString(sum[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, found := s.entries[key]; found {
		e.refs++
		return key, e.data, true
	}
	if s.used+len(data) > s.limit {
		return "", nil, false
	}
	s.entries[key] = &storedCard{data: data, refs: 1}
	s.used += len(data)
	return key, data, true
}

// release drops one reference to key ("" is a no-op).
func (s *cardStore) release(key string) {
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
		s.used -= len(e.data)
		delete(s.entries, key)
	}
}

// verification returns the signature verification of the held card key under the bundle with
// hash bundle, calling verify only when no pod serving the same card has had it computed under
// that bundle yet. A card the store does not hold (key "") is verified each time; a verify that
// reports !ok (it could not run) is not kept.
func (s *cardStore) verification(key, bundle string, verify func() (signature.Result, bool)) signature.Result {
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
func (s *cardStore) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}
