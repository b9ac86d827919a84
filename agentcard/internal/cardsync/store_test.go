package cardsync

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/agentcard/internal/intern"
)

func TestCardStoreSharesAndBounds(t *testing.T) {
	s := newStore(10)
	summary := func(status string) *cardSummary { return &cardSummary{hash: status, status: []byte(status)} }
	ka, kb, kc := bodyKey([]byte("a")), bodyKey([]byte("b")), bodyKey([]byte("c"))
	_, found := s.lookup(ka)
	assert.False(t, found)
	a, ok := s.hold(ka, summary("aaaa"))
	require.True(t, ok)
	assert.Equal(t, ka, a.heldKey)
	b, ok := s.hold(ka, summary("aaaa"))
	require.True(t, ok)
	assert.Same(t, a, b, "pods serving the same body share one copy")
	c, found := s.lookup(ka)
	require.True(t, found)
	assert.Same(t, a, c, "a body already held is found without its card")
	assert.Equal(t, 4, s.size())

	_, ok = s.hold(kb, summary("bbbbbb"))
	require.True(t, ok)
	assert.Equal(t, 10, s.size())
	_, ok = s.hold(kc, summary("c"))
	assert.False(t, ok, "the budget is full")
	assert.Equal(t, 10, s.size())

	s.release(ka)
	s.release(ka)
	assert.Equal(t, 10, s.size(), "one pod still holds it")
	s.release(ka)
	assert.Equal(t, 6, s.size())
	_, found = s.lookup(ka)
	assert.False(t, found, "released by every pod: gone")
	s.release(kb)
	s.release("")
	s.release("unknown")
	assert.Zero(t, s.size())
	assert.Empty(t, s.entries)
}

// TestStoreHoldsTheSharedCopy: the bytes the store keeps for the controller's next status are the
// process's one copy of the card (intern.Bytes), the one the cached AgentCards' status.card holds
// (the controller's cache transform shares through the same store).
func TestStoreHoldsTheSharedCopy(t *testing.T) {
	encoded := []byte(`{"name":"shared-by-store-and-cache","version":"1"}`)
	s := newStore(1 << 20)
	held, ok := s.hold("body", &cardSummary{hash: "h", status: bytes.Clone(encoded)})
	require.True(t, ok)
	cached := intern.Bytes(bytes.Clone(encoded))
	assert.Equal(t, encoded, cached)
	assert.Same(t, unsafe.SliceData(held.status), unsafe.SliceData(cached), "the store and the cache hold a copy each")
}
