package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/intern"
)

// TestCacheSharesTheCardCopy: the cached AgentCard's status.card (decoded from the API server's
// answer) is the process's one copy of the card (intern.Bytes), the one the card store keeps for
// the controller's next status (cardsync's TestStoreHoldsTheSharedCopy).
func TestCacheSharesTheCardCopy(t *testing.T) {
	encoded := []byte(`{"name":"shared-by-store-and-cache","version":"1"}`)
	held := intern.Bytes(bytes.Clone(encoded))

	decoded := &v1alpha1.AgentCard{Status: v1alpha1.AgentCardStatus{Card: &k8sruntime.RawExtension{Raw: bytes.Clone(encoded)}}}
	o, err := shareCard(decoded)
	require.NoError(t, err)
	cached := o.(*v1alpha1.AgentCard).Status.Card.Raw
	assert.Equal(t, encoded, cached)
	assert.Same(t, unsafe.SliceData(held), unsafe.SliceData(cached), "the store and the cache hold a copy each")
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
