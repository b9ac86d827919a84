package ducktest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Arrivals records when a load test's watch first saw each marker (an update's distinctive value),
// so that the update's latency is measured from the watch event, not from the next poll.
type Arrivals struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// Mark records now as the arrival of marker, unless it arrived before.
func (a *Arrivals) Mark(marker string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = map[string]time.Time{}
	}
	if _, ok := a.seen[marker]; !ok {
		a.seen[marker] = time.Now()
	}
}

// Await waits up to five minutes for marker to arrive and returns how long after since it did;
// the test fails with what when it never does.
func (a *Arrivals) Await(ctx context.Context, t *testing.T, marker string, since time.Time, what string) time.Duration {
	t.Helper()
	var latency time.Duration
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		at, ok := a.seen[marker]
		latency = at.Sub(since)
		return ok, nil
	}), "%s %s never arrived", what, marker)
	return latency
}
