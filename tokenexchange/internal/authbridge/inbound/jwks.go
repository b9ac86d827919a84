package inbound

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idpclient"
)

// KeySet holds the identity provider's signing keys, fetched from its JWKS URL. Keys are
// refreshed every RefreshInterval, and at once (at most every MinRefreshInterval) when a token
// names a key the set does not hold, which is how a rotation at the provider shows up. A failed
// refresh keeps the keys it had.
type KeySet struct {
	URL                string
	Client             *http.Client
	RefreshInterval    time.Duration
	MinRefreshInterval time.Duration
	now                func() time.Time

	mu        sync.Mutex
	keys      *jose.JSONWebKeySet
	fetchedAt time.Time
	triedAt   time.Time
	lastErr   error
	inflight  chan struct{}
}

// NewKeySet returns a key set for url; nothing is fetched until the first use or Refresh.
func NewKeySet(url string, client *http.Client) *KeySet {
	return &KeySet{URL: url, Client: client, RefreshInterval: 10 * time.Minute, MinRefreshInterval: 10 * time.Second, now: time.Now}
}

// maxJWKSSize bounds a JWKS document.
const maxJWKSSize = 1 << 20

// Key returns the key with id kid (any key when kid is empty and the set holds exactly one).
func (k *KeySet) Key(ctx context.Context, kid string) (*jose.JSONWebKey, error) {
	keys, stale := k.current()
	if keys == nil || stale {
		_ = k.Refresh(ctx) // an error keeps the old keys; it is reported below if they do not help
		keys, _ = k.current()
	}
	if key := find(keys, kid); key != nil {
		return key, nil
	}
	if k.mayRefreshForUnknownKey() {
		_ = k.Refresh(ctx)
		keys, _ = k.current()
		if key := find(keys, kid); key != nil {
			return key, nil
		}
	}
	if keys == nil {
		return nil, fmt.Errorf("signing keys unavailable: %w", k.Err())
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

func (k *KeySet) current() (*jose.JSONWebKeySet, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys, k.keys != nil && k.now().Sub(k.fetchedAt) > k.RefreshInterval
}

func (k *KeySet) mayRefreshForUnknownKey() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.now().Sub(k.triedAt) >= k.MinRefreshInterval
}

// Loaded reports whether keys were fetched at least once.
func (k *KeySet) Loaded() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys != nil
}

// Err returns the error of the latest refresh, nil when it succeeded.
func (k *KeySet) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastErr
}

// Refresh fetches the key set now. Concurrent callers share one fetch.
func (k *KeySet) Refresh(ctx context.Context) error {
	k.mu.Lock()
	if wait := k.inflight; wait != nil {
		k.mu.Unlock()
		select {
		case <-wait:
			return k.Err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	done := make(chan struct{})
	k.inflight = done
	k.triedAt = k.now()
	k.mu.Unlock()

	keys, err := k.fetch(ctx)
	k.mu.Lock()
	if err == nil {
		k.keys, k.fetchedAt = keys, k.now()
	}
	k.lastErr = err
	k.inflight = nil
	k.mu.Unlock()
	close(done)
	return err
}

func (k *KeySet) fetch(ctx context.Context) (*jose.JSONWebKeySet, error) {
	// A fetch outlives the request that triggered it only up to its own timeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
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
