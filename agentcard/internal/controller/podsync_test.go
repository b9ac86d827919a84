package controller

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kagenti/platform/agentcard/internal/resources"
	"github.com/kagenti/platform/agentcard/internal/signature"
)

// What a verification result repeats from the card (a kid or alg of any size, quoted in messages)
// is cut before it is kept per pod.
func TestBoundedResult(t *testing.T) {
	huge := strings.Repeat("k", 100<<10)
	v := boundedResult(signature.Result{KeyID: huge, Algorithm: huge, SpiffeID: huge, Message: "kid " + huge + " cannot be resolved"})
	assert.LessOrEqual(t, len(v.KeyID), resources.MaxKeyIDBytes+len("…"))
	assert.LessOrEqual(t, len(v.Algorithm), resources.MaxKeyIDBytes+len("…"))
	assert.LessOrEqual(t, len(v.SpiffeID), resources.MaxSpiffeIDBytes+len("…"))
	assert.LessOrEqual(t, len(v.Message), resources.MaxMessageBytes+len("…"))
}

// The quick retries of a failed fetch: 1, 2, 4, 8 s, none longer than a quarter of the sync
// period, then none until a sync without failure starts the count again.
func TestNextRetryIsBounded(t *testing.T) {
	seq := func(cs *cardState, period time.Duration) []time.Duration {
		var out []time.Duration
		for range 10 {
			d, ok := cs.nextRetry(true, period)
			if !ok {
				break
			}
			out = append(out, d)
		}
		return out
	}
	cs := &cardState{}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}, seq(cs, time.Hour))
	_, ok := cs.nextRetry(true, time.Hour)
	assert.False(t, ok, "spent: the sync period from now on")
	_, ok = cs.nextRetry(false, time.Hour)
	assert.False(t, ok, "no failure: no retry")
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, seq(cs, DefaultSyncPeriod), "a success starts again; capped at a quarter of 30 s")
	assert.Equal(t, []time.Duration{time.Second}, seq(&cardState{}, 5*time.Second))
}

// A sync lists its pods through the label index when its selector has one equality requirement on
// a label the index keeps.
func TestIndexedRequirement(t *testing.T) {
	for sel, want := range map[string]string{
		"app=weather":                      "app=weather",
		"app==weather,tier!=db":            "app=weather",
		"tier notin (db),app in (weather)": "app=weather",
		"app in (a,b)":                     "",
		"app,!legacy":                      "",
		"app!=weather":                     "",
		// Labels the index leaves out are never looked up; another requirement is.
		"kagenti.io/signature-verified=true":       "",
		"app=weather,pod-template-hash=7b6c8747f":  "app=weather",
		"controller-revision-hash=abc,app=weather": "app=weather",
		"statefulset.kubernetes.io/pod-name=db-0":  "",
	} {
		s, err := labels.Parse(sel)
		require.NoError(t, err)
		got, ok := indexedRequirement(s)
		assert.Equal(t, want, got, sel)
		assert.Equal(t, want != "", ok, sel)
	}
}

// The index keeps a pod's labels but agentcard's own verdict and the per-pod and per-revision
// hashes the workload controllers add.
func TestPodIndexValues(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		"app": "weather", "tier": "agent", "pod-template-hash": "7b6c8747f", "kagenti.io/signature-verified": "true",
	}}}
	got := podIndexValues(p)
	sort.Strings(got)
	assert.Equal(t, []string{"app=weather", "tier=agent"}, got)
}
