package sidecar

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeNow is a clock that moves only when the test says so.
type fakeNow struct{ offset atomic.Int64 }

var epoch = time.Now()

func (c *fakeNow) now() time.Time          { return epoch.Add(time.Duration(c.offset.Load())) }
func (c *fakeNow) advance(d time.Duration) { c.offset.Add(int64(d)) }

func healthz(t *testing.T, h http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return rec.Code, rec.Body.String()
}

func listen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}

func TestHealthzFailsWhenAnAcceptLoopIsWedged(t *testing.T) {
	var c fakeNow
	loops := NewLoops()
	loops.now = c.now
	idle := loops.Listener("idle loop", listen(t))
	wedged := loops.Listener("wedged loop", listen(t))
	h := AdminHandler("inbound", nil, nil, nil, loops.Check)

	inAccept := make(chan struct{})
	go func() { // a healthy loop with no traffic: it waits in Accept
		close(inAccept)
		if c, err := idle.Accept(); err == nil {
			c.Close()
		}
	}()
	accepted := make(chan struct{})
	go func() { // a loop that accepts one connection and never comes back (a handler run inline that hangs)
		if c, err := wedged.Accept(); err == nil {
			defer c.Close()
		}
		close(accepted)
		<-t.Context().Done()
	}()
	<-inAccept
	conn, err := net.Dial("tcp", wedged.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	<-accepted

	code, body := healthz(t, h)
	assert.Equal(t, http.StatusOK, code, "within Stall a loop out of Accept is busy, not wedged: %s", body)

	c.advance(DefaultStall + time.Second)
	require.Eventually(t, func() bool { return len(loops.Check()) == 1 }, 10*time.Second, time.Millisecond, "the idle loop reaches Accept")
	code, body = healthz(t, h)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "wedged loop: wedged, not accepting connections for 11s\n", body, "the idle loop is alive however long it waits")
}

func TestHealthzFailsWhenAListenerIsClosed(t *testing.T) {
	loops := NewLoops()
	ln := loops.Listener("outbound proxy on 127.0.0.1:15123", listen(t))
	h := AdminHandler("outbound", nil, nil, nil, loops.Check)
	require.NoError(t, ln.Close())
	code, body := healthz(t, h)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "outbound proxy on 127.0.0.1:15123: the listener was closed\n", body)
}

func TestHealthzWithoutLivenessAnswersOK(t *testing.T) {
	code, body := healthz(t, AdminHandler("register", nil, nil, nil, nil))
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok\n", body)
}
