package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCardStoreSharesAndBounds(t *testing.T) {
	s := newCardStore(10)
	k1, a, ok := s.hold([]byte("aaaa"))
	require.True(t, ok)
	k2, b, ok := s.hold([]byte("aaaa"))
	require.True(t, ok)
	assert.Equal(t, k1, k2)
	assert.Same(t, &a[0], &b[0], "pods serving the same card share one copy")
	assert.Equal(t, 4, s.size())

	kb, _, ok := s.hold([]byte("bbbbbb"))
	require.True(t, ok)
	assert.Equal(t, 10, s.size())
	_, _, ok = s.hold([]byte("c"))
	assert.False(t, ok, "the budget is full")
	assert.Equal(t, 10, s.size())

	s.release(k1)
	assert.Equal(t, 10, s.size(), "one pod still holds it")
	s.release(k2)
	assert.Equal(t, 6, s.size())
	s.release(kb)
	s.release("")
	s.release("unknown")
	assert.Zero(t, s.size())
	assert.Empty(t, s.entries)
}
