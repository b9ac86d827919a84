// Package intern keeps one copy of the byte strings and strings that many cached objects of the
// agentcard controller repeat (a card's bytes in status.card and in the card store, label keys and
// values, condition reasons), for as long as one holder keeps it.
package intern

import (
	"bytes"
	"crypto/sha256"
	"hash/maphash"
	"runtime"
	"strings"
	"sync"
	"unsafe"
	"weak"
)

// sharedBytes keeps one copy of equal byte strings held for long by several owners: a card's
// bytes as status.card carries them are held by the cached AgentCard (for the discovery API) and
// by the cardStore (for the controller's next status), and by every cached AgentCard whose pods
// serve the same card. Each would otherwise be a copy of its own. The copy lives as long as one
// owner holds it (the store only points at it weakly). Owners must not modify the bytes.
// Safe for concurrent use.
type sharedBytes struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]weakBytes
}

// weakBytes points at a held copy without keeping it alive.
type weakBytes struct {
	first weak.Pointer[byte]
	n     int
}

func newSharedBytes() *sharedBytes {
	return &sharedBytes{entries: map[[sha256.Size]byte]weakBytes{}}
}

// cardBytes is the process's one store of card bytes: the cache's transform and the card store
// share through it.
var cardBytes = newSharedBytes()

// Bytes returns the process's held copy of b's content (see sharedBytes.share): the cached
// AgentCards' status.card and the card store's bytes of the same card are one copy. The result
// must not be modified.
func Bytes(b []byte) []byte {
	return cardBytes.share(b)
}

// share returns the held copy of b's content, keeping a copy of b when none is held. b itself is
// never kept: it may be part of a larger buffer.
func (s *sharedBytes) share(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	key := sha256.Sum256(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.entries[key]; ok && w.n == len(b) {
		if p := w.first.Value(); p != nil {
			if held := unsafe.Slice(p, w.n); bytes.Equal(held, b) {
				return held
			}
		}
	}
	held := bytes.Clone(b)
	s.entries[key] = weakBytes{first: weak.Make(&held[0]), n: len(held)}
	runtime.AddCleanup(&held[0], s.forget, key)
	return held
}

// forget drops the entry of key once its copy is gone (not one that replaced it).
func (s *sharedBytes) forget(key [sha256.Size]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.entries[key]; ok && w.first.Value() == nil {
		delete(s.entries, key)
	}
}

// len returns the number of entries (the tests read it).
func (s *sharedBytes) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// stringStore interns strings for the cached objects. Unlike unique.Make, whose canonical copy
// is forgotten once no Handle is left (a holder of the string alone does not count, so a string
// interned after a garbage collection got a copy of its own), an entry here lives as long as the
// string's bytes are held. Safe for concurrent use.
type stringStore struct {
	mu      sync.Mutex
	seed    maphash.Seed
	entries map[uint64]weakBytes
}

// internedStrings is the process's one store of interned strings.
var internedStrings = &stringStore{seed: maphash.MakeSeed(), entries: map[uint64]weakBytes{}}

// String returns the canonical copy of s: equal strings of many cached objects share one, for as
// long as one of them holds it.
func String(s string) string {
	return internedStrings.intern(s)
}

// Labels copies labels with interned keys and values.
func Labels(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		out[String(k)] = String(v)
	}
	return out
}

// intern returns the held copy of v, keeping a copy of v when none is held (v itself may be part
// of a larger buffer, such as a decoded object's).
func (s *stringStore) intern(v string) string {
	if v == "" {
		return ""
	}
	key := maphash.String(s.seed, v)
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.entries[key]; ok && w.n == len(v) {
		if p := w.first.Value(); p != nil {
			if held := unsafe.String(p, w.n); held == v {
				return held
			}
		}
	}
	held := strings.Clone(v)
	data := unsafe.StringData(held)
	s.entries[key] = weakBytes{first: weak.Make(data), n: len(held)}
	runtime.AddCleanup(data, s.forget, key)
	return held
}

// forget drops the entry of key once its string is gone (not one that replaced it).
func (s *stringStore) forget(key uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.entries[key]; ok && w.first.Value() == nil {
		delete(s.entries, key)
	}
}
