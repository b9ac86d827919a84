package controller

import (
	"bytes"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
)

// TestStoreAndCacheShareACard: the bytes the cardStore keeps for the controller's next status and
// the cached AgentCard's status.card (decoded separately, from the API server's answer) are one
// copy once both hold the same card.
func TestStoreAndCacheShareACard(t *testing.T) {
	encoded := []byte(`{"name":"shared-by-store-and-cache","version":"1"}`)
	store := newCardStore(1 << 20)
	held, ok := store.hold("body", &cardSummary{hash: "h", status: bytes.Clone(encoded)})
	require.True(t, ok)

	decoded := &v1alpha1.AgentCard{Status: v1alpha1.AgentCardStatus{Card: &k8sruntime.RawExtension{Raw: bytes.Clone(encoded)}}}
	o, err := shareCard(decoded)
	require.NoError(t, err)
	cached := o.(*v1alpha1.AgentCard).Status.Card.Raw
	assert.Equal(t, encoded, cached)
	assert.Same(t, unsafe.SliceData(held.status), unsafe.SliceData(cached), "the store and the cache hold a copy each")
}

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
