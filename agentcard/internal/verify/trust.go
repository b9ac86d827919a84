package verify

import (
	"sync"
	"time"

	"github.com/kagenti/platform/agentcard/internal/signature"
)

// TrustStore holds the current trust bundle. The bundle ConfigMap's watcher replaces it; every
// cached verification remembers the bundle hash it was made with, so a rotation re-verifies cards.
type TrustStore struct {
	mu       sync.RWMutex
	bundle   *signature.Bundle
	loadedAt time.Time
	err      error
}

// Set installs a new bundle (nil with err when the ConfigMap is missing or unreadable).
func (t *TrustStore) Set(b *signature.Bundle, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.bundle, t.err = b, err
	if b != nil {
		t.loadedAt = time.Now()
	}
}

// Get returns the bundle (nil when none is loaded) and the last load error.
func (t *TrustStore) Get() (*signature.Bundle, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.bundle, t.err
}

// LoadedAt is when the current bundle was loaded.
func (t *TrustStore) LoadedAt() time.Time {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.loadedAt
}

// Hash identifies the current bundle ("" when none).
func (t *TrustStore) Hash() string {
	b, _ := t.Get()
	if b == nil {
		return ""
	}
	return b.Hash
}
