package inbound

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idptest"
)

// A JWKS redirect is not followed: whoever the Location names would choose the keys trusted.
func TestJWKSRedirectIsNotFollowed(t *testing.T) {
	trap := idptest.NewTrap(t)
	idp := idptest.NewRedirector(t, http.StatusFound, trap.URL)
	k := NewKeySet(idp.URL+"/certs", http.DefaultClient)
	err := k.Refresh(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), trap.URL+"/certs", "the error names the Location")
	assert.Empty(t, trap.Hits())
	assert.False(t, k.Loaded())
}

// clock is a fake time for a KeySet: it moves only when the test says so.
type clock struct{ offset atomic.Int64 }

var epoch = time.Now()

func (c *clock) now() time.Time            { return epoch.Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration)   { c.offset.Add(int64(d)) }
func (c *clock) install(k *KeySet) *KeySet { k.now = c.now; return k }

// fetchWatch is the JWKS client's transport: it counts the fetches that came back (an answer or
// an error), so that a test can tell whether a request waited for one.
type fetchWatch struct{ ended atomic.Int32 }

func (w *fetchWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	defer w.ended.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// settle waits until no fetch is in flight.
func settle(k *KeySet) {
	k.mu.Lock()
	wait := k.inflight
	k.mu.Unlock()
	if wait != nil {
		<-wait
	}
}

func signedWith(t *testing.T, key idptest.Key, i int) string {
	return key.Sign(t, idptest.Claims(issuer, audience, time.Hour, map[string]any{"jti": fmt.Sprint(i), "scope": "agent:invoke"}))
}

// Issue 26 defect 3: with valid keys in hand, a JWKS endpoint that accepts and never answers must
// not hold requests, and must cost one fetch, not one per request.
func TestHeldKeysServeWhileTheJWKSIsBlackHoled(t *testing.T) {
	key := idptest.NewRSAKey(t, "k1")
	jwks := idptest.NewJWKSServer(t, key)
	watch := &fetchWatch{}
	var c clock
	v := &Validator{Keys: c.install(NewKeySet(jwks.URL(), &http.Client{Transport: watch})), Policy: Policy{Issuer: issuer, Audience: audience}}
	_, err := v.Validate(context.Background(), signedWith(t, key, 0))
	require.NoError(t, err, "the first use loads the keys")
	require.Equal(t, int32(1), watch.ended.Load())

	jwks.SetBlackHole(true)
	c.advance(v.Keys.RefreshInterval + time.Second) // the keys held are due for a refresh
	for i := 1; i <= 20; i++ {
		_, err := v.Validate(context.Background(), signedWith(t, key, i)) // no deadline: only the design bounds the wait
		require.NoError(t, err, "request %d is served with the keys held", i)
		require.Equal(t, int32(1), watch.ended.Load(), "request %d completed before the background fetch came back: it did not wait for it", i)
	}
	<-jwks.Held() // the background refresh did start, and the black hole holds it
	assert.Equal(t, 2, jwks.Fetches(), "the load and one background refresh, not one fetch per request")
}

// During an outage (keys held, the endpoint failing) the fetches follow an exponential backoff
// shared by every request, whatever the number of requests.
func TestJWKSOutageFetchesBackOff(t *testing.T) {
	key := idptest.NewECKey(t, "k1")
	jwks := idptest.NewJWKSServer(t, key)
	var c clock
	k := c.install(NewKeySet(jwks.URL(), http.DefaultClient))
	k.jitter = func(d time.Duration) time.Duration { return d } // the schedule without its spread
	v := &Validator{Keys: k, Policy: Policy{Issuer: issuer, Audience: audience}}
	require.NoError(t, k.Refresh(context.Background()))

	jwks.SetDown(true)
	c.advance(k.RefreshInterval + time.Second)
	n := 0
	burst := func() {
		for range 20 {
			n++
			_, err := v.Validate(context.Background(), signedWith(t, key, n))
			require.NoError(t, err, "served with the keys held")
		}
		settle(k)
	}
	burst()
	require.Equal(t, 2, jwks.Fetches(), "20 requests: one background refresh")
	require.Error(t, k.Err())

	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
		c.advance(wait - time.Millisecond)
		burst()
		assert.Equal(t, 2+i, jwks.Fetches(), "no fetch before the backoff of failure %d (%s) is over", i+1, wait)
		c.advance(time.Millisecond)
		burst()
		assert.Equal(t, 3+i, jwks.Fetches(), "one fetch once the backoff of failure %d (%s) is over", i+1, wait)
	}

	jwks.SetDown(false)
	c.advance(k.MaxBackoff)
	burst()
	assert.NoError(t, k.Err(), "the provider is back: the next refresh succeeds")
	fetches := jwks.Fetches()
	c.advance(k.RefreshInterval / 2)
	burst()
	assert.Equal(t, fetches, jwks.Fetches(), "fresh keys: no fetch until RefreshInterval")
}

func TestBackoffIsBoundedAndJittered(t *testing.T) {
	k := NewKeySet("http://idp.example/certs", http.DefaultClient)
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute},
		[]time.Duration{k.backoff(1), k.backoff(2), k.backoff(3), k.backoff(4), k.backoff(5), k.backoff(6), k.backoff(7), k.backoff(1000)})
	for range 1000 {
		d := equalJitter(8 * time.Second)
		require.True(t, d >= 4*time.Second && d < 8*time.Second, "%s outside [4s, 8s)", d)
	}
}

// A token signed by a key the set does not hold (a rotation) starts one refresh, shared by all
// the requests that need it; each waits at most until its own context ends.
func TestUnknownKeyRefreshIsSharedAndBoundedByTheRequestContext(t *testing.T) {
	key, rotated := idptest.NewECKey(t, "k1"), idptest.NewECKey(t, "k2")
	jwks := idptest.NewJWKSServer(t, key)
	watch := &fetchWatch{}
	var c clock
	k := c.install(NewKeySet(jwks.URL(), &http.Client{Transport: watch}))
	v := &Validator{Keys: k, Policy: Policy{Issuer: issuer, Audience: audience}}
	require.NoError(t, k.Refresh(context.Background()))
	c.advance(k.MinRefreshInterval)

	jwks.SetBlackHole(true)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error)
	const waiters = 10
	for i := range waiters {
		go func() {
			_, err := v.Validate(ctx, signedWith(t, rotated, i))
			errs <- err
		}()
	}
	<-jwks.Held() // the refresh started and hangs
	cancel()      // the requests give up
	for range waiters {
		err := <-errs
		assert.ErrorContains(t, err, `signing key "k2": gave up waiting for the JWKS refresh`)
	}
	assert.Equal(t, int32(1), watch.ended.Load(), "the requests returned while the refresh was still held")
	assert.Equal(t, 2, jwks.Fetches(), "one refresh for all the waiters")

	// The black hole lets go and the refresh ends (failed, or retried by the transport and
	// answered with the old keys); then the provider publishes the new key. The next refresh
	// waits for MinRefreshInterval.
	jwks.SetBlackHole(false)
	settle(k)
	jwks.SetKeys(key, rotated)
	fetched := jwks.Fetches()
	for i := range 20 {
		_, err := v.Validate(context.Background(), signedWith(t, rotated, 100+i))
		assert.ErrorContains(t, err, `signed by unknown key "k2"`)
	}
	assert.Equal(t, fetched, jwks.Fetches(), "no other refresh within MinRefreshInterval")

	c.advance(k.MinRefreshInterval)
	for i := range 20 {
		_, err := v.Validate(context.Background(), signedWith(t, rotated, 200+i))
		assert.NoError(t, err, "the next refresh brings the new key")
	}
	assert.Equal(t, fetched+1, jwks.Fetches())
}
