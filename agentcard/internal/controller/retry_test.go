package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

// failingServer answers 503 to its first failures requests (all of them when failures < 0), then
// the card, and records the status of every answer in order.
type failingServer struct {
	mu       sync.Mutex
	failures int
	answers  []int
}

func serveFailing(t *testing.T, ip string, failures int, body []byte) *failingServer {
	t.Helper()
	s := &failingServer{failures: failures}
	serveOn(t, ip, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		code := http.StatusOK
		if s.failures < 0 || len(s.answers) < s.failures {
			code = http.StatusServiceUnavailable
		}
		s.answers = append(s.answers, code)
		s.mu.Unlock()
		if code != http.StatusOK {
			w.WriteHeader(code)
			return
		}
		_, _ = w.Write(body)
	}))
	return s
}

func (s *failingServer) seen() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.answers...)
}

// hourly is a sync period no test waits for: whatever is fetched again within a test is a retry.
func hourly(c *v1alpha1.AgentCard) { c.Spec.SyncPeriod = &metav1.Duration{Duration: time.Hour} }

// A pod whose card server fails at first (not up yet when the pod became ready) gets its card as
// soon as the server answers: the failed fetch is retried with a short backoff, not a sync period
// (an hour here) later.
func TestFailedFetchIsRetriedWithBackoff(t *testing.T) {
	ns := newNamespace(t)
	srv := serveFailing(t, "127.44.9.1", 2, testcards.Weather("1.0.0"))
	labels := map[string]string{"app": "late"}
	makePod(t, ns, "late", "127.44.9.1", "", labels)
	require.NoError(t, k8s.Create(context.Background(), selectorCard(ns, "late", labels, hourly)))
	eventually(t, 60*time.Second, func() string {
		c := getCard(t, ns, "late")
		if e := entry(c, "late"); e == nil || e.FetchStatus != v1alpha1.FetchSuccess || cond(c, "Ready") != "True/CardAvailable" {
			return fmt.Sprintf("Ready=%s entry=%+v answers=%v", cond(c, "Ready"), e, srv.seen())
		}
		return ""
	})
	assert.Equal(t, []int{503, 503, 200}, srv.seen(), "two failed fetches, two retries, then the card")
}

// The retries stop with the pod (deleted) and with the AgentCard (deleted): nothing fetches a
// server that keeps failing once what selected it is gone. Without that, each would be fetched
// again after 2, 4 and 8 s.
func TestFetchRetryStopsWhenPodOrCardIsGone(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	podGone := serveFailing(t, "127.44.9.2", -1, nil)
	cardGone := serveFailing(t, "127.44.9.3", -1, nil)
	makePod(t, ns, "pod-gone", "127.44.9.2", "", map[string]string{"app": "pod-gone"})
	makePod(t, ns, "card-gone", "127.44.9.3", "", map[string]string{"app": "card-gone"})
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "pod-gone", map[string]string{"app": "pod-gone"}, hourly)))
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "card-gone", map[string]string{"app": "card-gone"}, hourly)))
	eventually(t, 60*time.Second, func() string {
		if a, b := len(podGone.seen()), len(cardGone.seen()); a < 2 || b < 2 {
			return fmt.Sprintf("fetches %d and %d, want a retry of each", a, b)
		}
		return ""
	})

	require.NoError(t, k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pod-gone"}}))
	require.NoError(t, k8s.Delete(ctx, &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "card-gone"}}))
	eventually(t, 30*time.Second, func() string {
		if c := getCard(t, ns, "pod-gone"); len(c.Status.Cards) != 0 {
			return fmt.Sprintf("pod-gone: %d pod entries", len(c.Status.Cards))
		}
		if err := cached.Get(ctx, client.ObjectKey{Namespace: ns, Name: "card-gone"}, &v1alpha1.AgentCard{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("card-gone still cached: %v", err)
		}
		return ""
	})
	a, b := len(podGone.seen()), len(cardGone.seen())
	// Longer than the retries that would be pending (2 + 4 + 8 s after the first).
	time.Sleep(16 * time.Second)
	assert.Equal(t, a, len(podGone.seen()), "the deleted pod is fetched no more")
	assert.Equal(t, b, len(cardGone.seen()), "the deleted AgentCard's pod is fetched no more")
}
