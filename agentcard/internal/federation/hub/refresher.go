package hub

import (
	"context"
	"crypto/x509"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"k8s.io/utils/clock"
)

// DefaultBundleFetchTimeout bounds one fetch of a member's bundle endpoint.
const DefaultBundleFetchTimeout = 10 * time.Second

// BundleRefresher is the leader's loop that keeps the members' trust bundles current from their
// bundle endpoints (spec.bundleEndpoint): each registration is fetched when due, concurrently and
// each at most once at a time, so a slow endpoint delays no other member. A fetched bundle takes
// effect in the Registry at once (the next member handshake and card verification use it); the
// StatusWriter persists it in the FederatedCluster's status.
type BundleRefresher struct {
	Registry *Registry
	Clock    clock.WithTicker
	// Tick is how often due registrations are looked for.
	Tick time.Duration
	// Timeout bounds one fetch (DefaultBundleFetchTimeout when 0).
	Timeout time.Duration
	// WebRoots verifies https_web endpoints; nil: the system's roots.
	WebRoots *x509.CertPool
	Log      logr.Logger

	mu sync.Mutex
	// due: registration → when its next fetch is due; the key changes with the spec (a new URL or
	// trust bundle is fetched at once).
	due      map[string]time.Time
	inFlight map[string]bool
	wg       sync.WaitGroup
}

// NeedLeaderElection: only the leader's registry serves member streams.
func (r *BundleRefresher) NeedLeaderElection() bool { return true }

// Start refreshes until ctx ends.
func (r *BundleRefresher) Start(ctx context.Context) error {
	select {
	case <-r.Registry.Ready():
	case <-ctx.Done():
		return nil
	}
	t := r.Clock.NewTicker(r.Tick)
	defer t.Stop()
	defer r.wg.Wait()
	for {
		r.RefreshDue(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// RefreshDue starts a fetch for every registration whose refresh is due, and returns without
// waiting for them (Wait does).
func (r *BundleRefresher) RefreshDue(ctx context.Context) {
	now := r.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.due == nil {
		r.due, r.inFlight = map[string]time.Time{}, map[string]bool{}
	}
	live := map[string]bool{}
	for _, reg := range r.Registry.WithEndpoints() {
		key := dueKey(reg)
		live[key] = true
		if next, ok := r.due[key]; (ok && now.Before(next)) || r.inFlight[reg.Name] {
			continue
		}
		r.inFlight[reg.Name] = true
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			next := r.refresh(ctx, reg)
			r.mu.Lock()
			defer r.mu.Unlock()
			delete(r.inFlight, reg.Name)
			r.due[key] = r.Clock.Now().Add(next)
		}()
	}
	for key := range r.due {
		if !live[key] {
			delete(r.due, key)
		}
	}
}

// Wait waits for the fetches RefreshDue started.
func (r *BundleRefresher) Wait() { r.wg.Wait() }

func dueKey(reg Registration) string {
	return reg.Name + "\x00" + reg.Seed + "\x00" + reg.Endpoint.URL + "\x00" + reg.Endpoint.ID.String()
}

// refresh fetches reg's bundle and records the outcome; it returns when to fetch again.
func (r *BundleRefresher) refresh(ctx context.Context, reg Registration) time.Duration {
	ep := BundleEndpoint{URL: reg.Endpoint.URL, ID: reg.Endpoint.ID, Web: reg.Endpoint.Web, Roots: r.WebRoots}
	if !ep.Web {
		// The endpoint proves itself with an SVID of the member domain, checked against the bundle
		// the hub trusts for it now: the spec's, or the last one fetched.
		ep.Trust = x509bundle.FromX509Authorities(reg.TrustDomain, reg.Bundle.X509.X509Authorities())
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultBundleFetchTimeout
	}
	b, err := FetchBundle(ctx, reg.TrustDomain, ep, timeout)
	if err == nil {
		err = r.Registry.SetFetchedBundle(reg.Name, b, r.Clock.Now())
		if err != nil {
			err = &FetchError{ReasonBundleRejected, err}
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		reason := ReasonEndpointUnreachable
		if fe := (*FetchError)(nil); errors.As(err, &fe) {
			reason = fe.Reason
		}
		r.Registry.SetFetchFailure(reg.Name, reason, err.Error())
		r.Log.Info("member bundle fetch failed; the bundle in effect stays", "cluster", reg.Name, "reason", reason, "error", err.Error())
		return MinRefreshInterval
	}
	r.Log.V(1).Info("member bundle refreshed", "cluster", reg.Name, "authorities", len(b.X509Authorities()))
	return nextRefresh(reg.Endpoint.Interval, b)
}

// nextRefresh is the bundle's spiffe_refresh_hint where it is shorter than interval, never below
// MinRefreshInterval.
func nextRefresh(interval time.Duration, b *spiffebundle.Bundle) time.Duration {
	if hint, ok := b.RefreshHint(); ok && hint > 0 && hint < interval {
		interval = hint
	}
	return max(interval, MinRefreshInterval)
}
