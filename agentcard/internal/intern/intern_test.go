package intern

import (
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSharedBytesForgetsWhatNoOneHolds: an entry goes once its last holder drops the bytes, and
// different contents never share.
func TestSharedBytesForgetsWhatNoOneHolds(t *testing.T) {
	s := newSharedBytes()
	a := s.share([]byte("card a"))
	b := s.share([]byte("card b"))
	assert.Equal(t, "card a", string(a))
	assert.Equal(t, "card b", string(b))
	assert.Equal(t, 2, s.len())
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	a, b = nil, nil
	require.Eventually(t, func() bool {
		runtime.GC()
		return s.len() == 0
	}, 10*time.Second, 10*time.Millisecond, "entries of dropped bytes stay")
	assert.Equal(t, "card a", string(s.share([]byte("card a"))), "a dropped content is kept again")
}

// TestInternedStringOutlivesAGarbageCollection: a string interned before a collection and still
// held is the one a later intern of the same content returns (unique.Make's canonical copy went
// with its last Handle, however many objects still held the string).
func TestInternedStringOutlivesAGarbageCollection(t *testing.T) {
	first := String(strings.Clone("kagenti.io/interned-before-a-gc"))
	runtime.GC()
	runtime.GC()
	again := String(strings.Clone("kagenti.io/interned-before-a-gc"))
	assert.Same(t, unsafe.StringData(first), unsafe.StringData(again), "a second copy after a garbage collection")
	runtime.KeepAlive(first)
}
