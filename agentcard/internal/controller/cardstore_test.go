package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCardStoreSharesAndBounds(t *testing.T) {
	s := newCardStore(10)
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
