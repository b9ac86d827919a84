package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
)

// proberFixture serves one role's /status with a hash the test sets, reachable at any pod IP.
type proberFixture struct {
	hash     atomic.Value
	requests atomic.Int32
	prober   *PodStatusProber
}

func newProberFixture(t *testing.T) *proberFixture {
	f := &proberFixture{}
	f.hash.Store("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		f.requests.Add(1)
		_ = json.NewEncoder(w).Encode(sidecar.Status{Role: "outbound", Ready: true, ContentHash: f.hash.Load().(string)})
	}))
	t.Cleanup(srv.Close)
	client := NewPodStatusClient()
	client.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, srv.Listener.Addr().String())
	}
	f.prober = NewPodStatusProber(client)
	return f
}

func rolePod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{InitContainers: []corev1.Container{{Name: contract.ComponentEnvoyProxy}, {Name: contract.ComponentSpiffeHelper}}},
		Status:     corev1.PodStatus{PodIP: "10.0.0.1"},
	}
}

// A pod seen on the wanted content is not asked again until the content changes: a settled
// workload costs no request per reconcile.
func TestProberAsksOnlyPodsNotKnownOnTheContent(t *testing.T) {
	f := newProberFixture(t)
	key := types.NamespacedName{Namespace: "ns", Name: "tx"}
	pods := []*cachedPod{newCachedPod(rolePod("a")), newCachedPod(rolePod("b"))}

	prop := f.prober.Probe(context.Background(), key, pods, "h1")
	assert.Empty(t, prop.Current)
	assert.Len(t, prop.Behind, 2)
	assert.EqualValues(t, 2, f.requests.Load())

	f.hash.Store("h1")
	prop = f.prober.Probe(context.Background(), key, pods, "h1")
	assert.Equal(t, []string{"a", "b"}, prop.Current)
	assert.EqualValues(t, 4, f.requests.Load())

	prop = f.prober.Probe(context.Background(), key, pods, "h1")
	assert.Equal(t, []string{"a", "b"}, prop.Current)
	assert.EqualValues(t, 4, f.requests.Load(), "no request for pods known on the content")

	prop = f.prober.Probe(context.Background(), key, pods, "h2")
	assert.Len(t, prop.Behind, 2)
	assert.EqualValues(t, 6, f.requests.Load(), "a new content asks again")
}

func TestDescribeListsAFewPods(t *testing.T) {
	m := map[string]string{}
	for i := range 8 {
		m[fmt.Sprintf("p%d", i)] = "x"
	}
	got := describe(m)
	assert.True(t, strings.HasPrefix(got, "pod p0 (x), pod p1 (x)"), got)
	assert.True(t, strings.HasSuffix(got, "pod p4 (x), and 3 more"), got)
}
