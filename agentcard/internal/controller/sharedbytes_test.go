package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
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

// TestInternedStringOutlivesAGarbageCollection: a string interned before a collection and still
// held is the one a later intern of the same content returns (unique.Make's canonical copy went
// with its last Handle, however many objects still held the string).
func TestInternedStringOutlivesAGarbageCollection(t *testing.T) {
	first := intern(strings.Clone("kagenti.io/interned-before-a-gc"))
	runtime.GC()
	runtime.GC()
	again := intern(strings.Clone("kagenti.io/interned-before-a-gc"))
	assert.Same(t, unsafe.StringData(first), unsafe.StringData(again), "a second copy after a garbage collection")
	runtime.KeepAlive(first)
}

// TestCachedStatusIsCompacted: AgentCards decoded from the API server's JSON are cached with their
// lists at their length and the strings they repeat (condition reasons and messages, the card
// hash of every pod entry) held once.
func TestCachedStatusIsCompacted(t *testing.T) {
	const status = `{"observedGeneration":1,"phase":"Active","cardHash":"%[1]s","conditions":[` +
		`{"type":"Ready","status":"True","reason":"CardAvailable","message":"the card is served by every ready pod","lastTransitionTime":"2026-01-01T00:00:00Z"},` +
		`{"type":"Synced","status":"True","reason":"Fetched","message":"fetched from 3 pods","lastTransitionTime":"2026-01-01T00:00:00Z"},` +
		`{"type":"SignatureVerified","status":"True","reason":"Verified","message":"verified","lastTransitionTime":"2026-01-01T00:00:00Z"},` +
		`{"type":"Bound","status":"True","reason":"Bound","message":"bound","lastTransitionTime":"2026-01-01T00:00:00Z"},` +
		`{"type":"Verified","status":"True","reason":"Verified","message":"verified and bound","lastTransitionTime":"2026-01-01T00:00:00Z"}],` +
		`"cards":[{"podName":"a-1","fetchStatus":"Success","cardHash":"%[1]s"},{"podName":"a-2","fetchStatus":"Success","cardHash":"%[1]s"},{"podName":"a-3","fetchStatus":"Success","cardHash":"%[1]s"}]}`
	hash := strings.Repeat("ab", 32)
	decode := func(name string) *v1alpha1.AgentCard {
		var c v1alpha1.AgentCard
		require.NoError(t, json.Unmarshal(fmt.Appendf(nil, `{"metadata":{"name":%q},"status":`+status+`}`, name, hash), &c))
		o, err := shareCard(&c)
		require.NoError(t, err)
		return o.(*v1alpha1.AgentCard)
	}
	a, b := decode("a"), decode("b")
	assert.Len(t, a.Status.Conditions, 5)
	assert.Equal(t, len(a.Status.Conditions), cap(a.Status.Conditions), "the conditions keep the decoder's spare room")
	assert.Equal(t, len(a.Status.Cards), cap(a.Status.Cards), "the pod entries keep the decoder's spare room")
	assert.Same(t, unsafe.StringData(a.Status.Conditions[1].Message), unsafe.StringData(b.Status.Conditions[1].Message), "a message repeated across AgentCards")
	assert.Same(t, unsafe.StringData(a.Status.Conditions[0].Reason), unsafe.StringData(b.Status.Conditions[0].Reason), "a reason repeated across AgentCards")
	for _, e := range a.Status.Cards {
		assert.Same(t, unsafe.StringData(a.Status.CardHash), unsafe.StringData(e.CardHash), "the card hash of a pod entry")
	}
	assert.Equal(t, "Success", a.Status.Cards[2].FetchStatus)
	assert.Equal(t, "fetched from 3 pods", a.Status.Conditions[1].Message)
}
