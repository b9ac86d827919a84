package inbound

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idpclient"
)

// KeySet holds the identity provider's signing keys, fetched from its JWKS URL.
//
// A request never waits on a fetch while the key it needs is held: keys older than
// RefreshInterval are still served, and refreshed in the background. A token naming a key the set
// does not hold (a rotation at the provider) triggers a refresh at most every MinRefreshInterval,
// shared by all the requests that wait for it, each for at most its own context's deadline. A
// failed fetch keeps the keys held and delays the next attempt by an exponential backoff with
// jitter (InitialBackoff doubling up to MaxBackoff), so an outage costs a fetch per backoff
// period, not one per request.
type KeySet struct {
	URL                string
	Client             *http.Client
	RefreshInterval    time.Duration
	MinRefreshInterval time.Duration
	InitialBackoff     time.Duration
	MaxBackoff         time.Duration
	// FetchTimeout bounds one fetch; it runs on its own, not under a request's context.
	FetchTimeout time.Duration
	now          func() time.Time
	jitter       func(time.Duration) time.Duration

	mu        sync.Mutex
	keys      *jose.JSONWebKeySet
	fetchedAt time.Time // of the keys held
	triedAt   time.Time // start of the latest fetch
	retryAt   time.Time // no fetch before, after a failure
	failures  int       // consecutive failed fetches
	lastErr   error
	inflight  chan struct{} // closed when the fetch in flight ends
}

// NewKeySet returns a key set for url; nothing is fetched until the first use, Refresh or
// RefreshIfDue.
func NewKeySet(url string, client *http.Client) *KeySet {
	return &KeySet{
		URL: url, Client: client, RefreshInterval: 10 * time.Minute, MinRefreshInterval: 10 * time.Second,
		InitialBackoff: time.Second, MaxBackoff: time.Minute, FetchTimeout: 10 * time.Second,
		now: time.Now, jitter: equalJitter,
	}
}

// maxJWKSSize bounds a JWKS document.
const maxJWKSSize = 1 << 20

// Key returns the key with id kid (any key when kid is empty and the set holds exactly one).
func (k *KeySet) Key(ctx context.Context, kid string) (*jose.JSONWebKey, error) {
	k.mu.Lock()
	if key := find(k.keys, kid); key != nil {
		if k.dueLocked() {
			k.startLocked()
		}
		k.mu.Unlock()
		return key, nil
	}
	// An unknown key, or none loaded yet: join the fetch in flight, or start one if allowed.
	wait := k.inflight
	if wait == nil && k.mayFetchForUnknownKeyLocked() {
		wait = k.startLocked()
	}
	k.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("signing key %q: gave up waiting for the JWKS refresh: %w", kid, context.Cause(ctx))
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if key := find(k.keys, kid); key != nil {
		return key, nil
	}
	if k.keys == nil {
		return nil, fmt.Errorf("signing keys unavailable: %w", k.lastErr)
	}
	return nil, fmt.Errorf("signed by unknown key %q", kid)
}

func find(keys *jose.JSONWebKeySet, kid string) *jose.JSONWebKey {
	if keys == nil {
		return nil
	}
	if kid == "" {
		if len(keys.Keys) == 1 {
			return &keys.Keys[0]
		}
		return nil
	}
	for i := range keys.Keys {
		if keys.Keys[i].KeyID == kid && keys.Keys[i].Use != "enc" {
			return &keys.Keys[i]
		}
	}
	return nil
}

// dueLocked reports whether a background fetch should start now: no keys yet or keys older than
// RefreshInterval, no fetch in flight, and the backoff of a failure over.
func (k *KeySet) dueLocked() bool {
	now := k.now()
	return k.inflight == nil && !now.Before(k.retryAt) &&
		(k.keys == nil || now.Sub(k.fetchedAt) > k.RefreshInterval)
}

// mayFetchForUnknownKeyLocked reports whether a token's unknown key may start a fetch now: at most
// one every MinRefreshInterval, and not during the backoff of a failure.
func (k *KeySet) mayFetchForUnknownKeyLocked() bool {
	now := k.now()
	return !now.Before(k.retryAt) && (k.triedAt.IsZero() || now.Sub(k.triedAt) >= k.MinRefreshInterval)
}

// startLocked starts a fetch in the background and returns the channel closed when it ends.
func (k *KeySet) startLocked() chan struct{} {
	done := make(chan struct{})
	k.inflight = done
	k.triedAt = k.now()
	go k.run(done)
	return done
}

func (k *KeySet) run(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), k.FetchTimeout)
	keys, err := k.fetch(ctx)
	cancel()
	k.mu.Lock()
	now := k.now()
	if err == nil {
		k.keys, k.fetchedAt = keys, now
		k.failures, k.retryAt = 0, time.Time{}
	} else {
		k.failures++
		k.retryAt = now.Add(k.jitter(k.backoff(k.failures)))
	}
	k.lastErr = err
	k.inflight = nil
	k.mu.Unlock()
	close(done)
}

// backoff is the delay after the n-th consecutive failure: InitialBackoff doubled n-1 times, at
// most MaxBackoff.
func (k *KeySet) backoff(n int) time.Duration {
	d := k.InitialBackoff
	for i := 1; i < n && d < k.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, k.MaxBackoff)
}

// equalJitter spreads a delay d over [d/2, d), so that the sidecars of many pods that lost the
// provider together do not retry together.
func equalJitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// RefreshIfDue starts a background fetch when the keys are missing or older than
// RefreshInterval and no backoff holds it back; it never waits for the fetch.
func (k *KeySet) RefreshIfDue() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dueLocked() {
		k.startLocked()
	}
}

// SetRefreshInterval changes RefreshInterval while the set is in use (a configuration change).
func (k *KeySet) SetRefreshInterval(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.RefreshInterval = d
}

// Loaded reports whether keys were fetched at least once.
func (k *KeySet) Loaded() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys != nil
}

// Err returns the error of the latest fetch, nil when it succeeded.
func (k *KeySet) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastErr
}

// Refresh fetches the key set now, whatever the schedule and the backoff, and waits for the
// fetch up to ctx's end. Concurrent callers share one fetch.
func (k *KeySet) Refresh(ctx context.Context) error {
	k.mu.Lock()
	wait := k.inflight
	if wait == nil {
		wait = k.startLocked()
	}
	k.mu.Unlock()
	select {
	case <-wait:
		return k.Err()
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (k *KeySet) fetch(ctx context.Context) (*jose.JSONWebKeySet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := idpclient.Do(k.Client, req)
	if err != nil {
		return nil, fmt.Errorf("fetching JWKS %s: %w", k.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching JWKS %s: %s", k.URL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSSize+1))
	if err != nil {
		return nil, fmt.Errorf("fetching JWKS %s: %w", k.URL, err)
	}
	if len(body) > maxJWKSSize {
		return nil, fmt.Errorf("JWKS %s exceeds %d bytes", k.URL, maxJWKSSize)
	}
	// Keys are decoded one by one: a key of a type this proxy does not know (providers publish
	// new ones) must not hide the others.
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("JWKS %s: %w", k.URL, err)
	}
	var set jose.JSONWebKeySet
	var skipped []error
	for _, r := range raw.Keys {
		var key jose.JSONWebKey
		if err := key.UnmarshalJSON(r); err != nil {
			skipped = append(skipped, err)
			continue
		}
		if !key.IsPublic() {
			return nil, fmt.Errorf("JWKS %s: key %q is not a public key", k.URL, key.KeyID)
		}
		set.Keys = append(set.Keys, key)
	}
	if len(set.Keys) == 0 {
		return nil, errors.Join(append([]error{fmt.Errorf("JWKS %s holds no usable key", k.URL)}, skipped...)...)
	}
	return &set, nil
}
