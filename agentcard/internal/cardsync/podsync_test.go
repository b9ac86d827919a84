package cardsync

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/status"
)

// What a verification result repeats from the card (a kid or alg of any size, quoted in messages)
// is cut before it is kept per pod.
func TestBoundedResult(t *testing.T) {
	huge := strings.Repeat("k", 100<<10)
	v := boundedResult(signature.Result{KeyID: huge, Algorithm: huge, SpiffeID: huge, Message: "kid " + huge + " cannot be resolved"})
	assert.LessOrEqual(t, len(v.KeyID), status.MaxKeyIDBytes+len("…"))
	assert.LessOrEqual(t, len(v.Algorithm), status.MaxKeyIDBytes+len("…"))
	assert.LessOrEqual(t, len(v.SpiffeID), status.MaxSpiffeIDBytes+len("…"))
	assert.LessOrEqual(t, len(v.Message), status.MaxMessageBytes+len("…"))
}

// The quick retries of a failed fetch: 1, 2, 4, 8 s, none longer than a quarter of the sync
// period, then none until a sync without failure starts the count again.
func TestNextRetryIsBounded(t *testing.T) {
	seq := func(cs *CardPods, period time.Duration) []time.Duration {
		var out []time.Duration
		for range 10 {
			d, ok := cs.NextRetry(true, period)
			if !ok {
				break
			}
			out = append(out, d)
		}
		return out
	}
	cs := &CardPods{}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}, seq(cs, time.Hour))
	_, ok := cs.NextRetry(true, time.Hour)
	assert.False(t, ok, "spent: the sync period from now on")
	_, ok = cs.NextRetry(false, time.Hour)
	assert.False(t, ok, "no failure: no retry")
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, seq(cs, 30*time.Second), "a success starts again; capped at a quarter of 30 s")
	assert.Equal(t, []time.Duration{time.Second}, seq(&CardPods{}, 5*time.Second))
}
