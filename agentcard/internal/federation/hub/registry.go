// Package hub is the federation hub: it authenticates member agents by their SPIFFE IDs against
// FederatedCluster registrations, re-verifies every card they send against the member's own trust
// bundle, keeps the accepted cards in memory (fed by the streams, served by the discovery API),
// ages them (stale after the TTL, withdrawn after the grace period) and reports each member in its
// FederatedCluster's status.
package hub

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/signature"
)

// Registration reasons (Ready=False on the FederatedCluster; its member is refused).
const (
	ReasonInvalidTrustBundle   = "InvalidTrustBundle"
	ReasonDuplicateTrustDomain = "DuplicateTrustDomain"
	ReasonInvalidRegistration  = "InvalidRegistration"
)

// Defaults of a FederatedCluster's optional fields (the CRD defaults them too; an older CRD may not).
const (
	DefaultTTL      = 30 * time.Second
	DefaultGrace    = 5 * time.Minute
	DefaultMaxCards = 5000
	// DefaultAgentPath is the member agent's identity within its trust domain.
	DefaultAgentPath = "/ns/kagenti-system/sa/kagenti-agentcard"
)

// Registration is a FederatedCluster as the hub uses it.
type Registration struct {
	Name        string
	Generation  int64
	TrustDomain spiffeid.TrustDomain
	Bundle      *signature.Bundle
	AgentID     spiffeid.ID
	// Namespaces allowed to export; nil allows every namespace.
	Namespaces map[string]bool
	TTL, Grace time.Duration
	MaxCards   int
	// Reason and Message say why the registration cannot be used ("" when it can).
	Reason, Message string
	// Seed identifies spec.trustBundle; a fetched bundle applies only while the seed it grew from
	// is the current one, so an admin's edit of spec.trustBundle resets the member to the spec.
	Seed string
	// Fetched says Bundle came from the member's bundle endpoint, not from spec.trustBundle.
	Fetched bool
	// Endpoint is spec.bundleEndpoint; nil without one.
	Endpoint *EndpointSpec
	// FetchedStatus describes the fetched bundle in effect (status.trustBundle); nil when
	// spec.trustBundle is.
	FetchedStatus *v1alpha1.FederatedTrustBundle
	// FetchReason and FetchMessage are the last fetch's failure ("" after a success).
	FetchReason, FetchMessage string
}

// EndpointSpec is a registration's bundle endpoint.
type EndpointSpec struct {
	URL string
	// Web: profile https_web (Web PKI); otherwise https_spiffe, authenticated as ID.
	Web      bool
	ID       spiffeid.ID
	Interval time.Duration
}

// DefaultRefreshInterval is spec.bundleEndpoint.refreshInterval's default, MinRefreshInterval
// its floor (also for a bundle's spiffe_refresh_hint and the retry after a failed fetch).
const (
	DefaultRefreshInterval = 5 * time.Minute
	MinRefreshInterval     = 30 * time.Second
)

// Seed identifies a spec.trustBundle.
func Seed(specBundle string) string {
	sum := sha256.Sum256([]byte(specBundle))
	return hex.EncodeToString(sum[:])
}

// RegistrationFrom reads a FederatedCluster. An unusable one comes back with Reason set.
func RegistrationFrom(fc *v1alpha1.FederatedCluster) Registration {
	r := Registration{Name: fc.Name, Generation: fc.Generation, TTL: DefaultTTL, Grace: DefaultGrace, MaxCards: DefaultMaxCards, Seed: Seed(fc.Spec.TrustBundle)}
	if fc.Spec.TTL != nil {
		r.TTL = fc.Spec.TTL.Duration
	}
	if fc.Spec.GracePeriod != nil {
		r.Grace = fc.Spec.GracePeriod.Duration
	}
	r.Grace = max(r.Grace, r.TTL)
	if fc.Spec.MaxCards != nil {
		r.MaxCards = int(*fc.Spec.MaxCards)
	}
	if len(fc.Spec.Namespaces) > 0 {
		r.Namespaces = map[string]bool{}
		for _, ns := range fc.Spec.Namespaces {
			r.Namespaces[ns] = true
		}
	}
	td, err := spiffeid.TrustDomainFromString(fc.Spec.TrustDomain)
	if err != nil {
		r.Reason, r.Message = ReasonInvalidRegistration, fmt.Sprintf("spec.trustDomain %q: %v", fc.Spec.TrustDomain, err)
		return r
	}
	r.TrustDomain = td
	agent := cmp.Or(fc.Spec.AgentSpiffeID, "spiffe://"+td.Name()+DefaultAgentPath)
	if r.AgentID, err = spiffeid.FromString(agent); err != nil || r.AgentID.TrustDomain() != td {
		r.Reason, r.Message = ReasonInvalidRegistration, fmt.Sprintf("spec.agentSpiffeID %q is not a SPIFFE ID of trust domain %q", agent, td.Name())
		return r
	}
	if r.Bundle, err = signature.ParseBundle(td, []byte(fc.Spec.TrustBundle)); err != nil {
		r.Reason, r.Message = ReasonInvalidTrustBundle, "spec.trustBundle: "+err.Error()
		return r
	}
	if ep := fc.Spec.BundleEndpoint; ep != nil {
		e := &EndpointSpec{URL: ep.URL, Web: ep.Profile == v1alpha1.BundleProfileWeb, Interval: DefaultRefreshInterval}
		if ep.RefreshInterval != nil {
			e.Interval = max(ep.RefreshInterval.Duration, MinRefreshInterval)
		}
		if !e.Web {
			if e.ID, err = spiffeid.FromString(ep.SPIFFEID); err != nil || e.ID.TrustDomain() != td {
				r.Reason, r.Message = ReasonInvalidRegistration, fmt.Sprintf("spec.bundleEndpoint.spiffeID %q is not a SPIFFE ID of trust domain %q", ep.SPIFFEID, td.Name())
				return r
			}
		}
		r.Endpoint = e
	}
	return r
}

// Usable says whether members may connect under r.
func (r Registration) Usable() bool { return r.Reason == "" }

// Registry holds the registrations by name and by trust domain, and is the hub's TLS bundle source:
// a member's certificate must chain to the bundle of a registered trust domain.
type Registry struct {
	ready     chan struct{}
	readyOnce sync.Once

	mu     sync.RWMutex
	byName map[string]Registration
	byTD   map[spiffeid.TrustDomain]string
	// fetched holds the bundles members' endpoints served, by registration name; they survive
	// Replace while their seed is the registration's.
	fetched map[string]fetchedBundle
	// failures holds the last failed fetch by registration name, until the next success.
	failures map[string]fetchFailure
}

type fetchedBundle struct {
	seed   string
	bundle *signature.Bundle
	status v1alpha1.FederatedTrustBundle
}

// fetchFailure is the last failed fetch of a registration's bundle endpoint.
type fetchFailure struct {
	seed, reason, message string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byName: map[string]Registration{}, byTD: map[spiffeid.TrustDomain]string{}, fetched: map[string]fetchedBundle{}, failures: map[string]fetchFailure{}, ready: make(chan struct{})}
}

// Ready is closed once the registrations were loaded.
func (g *Registry) Ready() <-chan struct{} { return g.ready }

// Replace installs every FederatedCluster at once. Two registrations of one trust domain: the one
// created first (then by name) keeps it; the other is unusable (DuplicateTrustDomain), so no
// member can publish under two names.
func (g *Registry) Replace(items []v1alpha1.FederatedCluster) {
	items = slices.Clone(items)
	slices.SortFunc(items, func(a, b v1alpha1.FederatedCluster) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	byName := make(map[string]Registration, len(items))
	byTD := make(map[spiffeid.TrustDomain]string, len(items))
	for i := range items {
		r := RegistrationFrom(&items[i])
		if r.Usable() {
			if other, taken := byTD[r.TrustDomain]; taken {
				r.Reason, r.Message = ReasonDuplicateTrustDomain, fmt.Sprintf("trust domain %q is already registered by FederatedCluster %s", r.TrustDomain.Name(), other)
			} else {
				byTD[r.TrustDomain] = r.Name
			}
		}
		byName[r.Name] = r
	}
	g.mu.Lock()
	// After a restart or a failover the fetched bundles come back from the status this leader or
	// the previous one wrote, while they grew from the current spec.trustBundle.
	for i := range items {
		fc := &items[i]
		r := byName[fc.Name]
		if _, have := g.fetched[fc.Name]; have || fc.Status.TrustBundle == nil || r.Endpoint == nil || !r.Usable() || fc.Status.TrustBundle.Seed != r.Seed {
			continue
		}
		if sb, err := signature.ParseBundle(r.TrustDomain, []byte(fc.Status.TrustBundle.Bundle)); err == nil {
			g.fetched[fc.Name] = fetchedBundle{seed: r.Seed, bundle: sb, status: *fc.Status.TrustBundle.DeepCopy()}
		}
	}
	for name, f := range g.fetched {
		r, ok := byName[name]
		if !ok || r.Seed != f.seed || r.Endpoint == nil {
			delete(g.fetched, name) // gone, spec.trustBundle edited, or the endpoint removed: the spec again
			continue
		}
		if r.Usable() {
			r.Bundle, r.Fetched = f.bundle, true
			st := f.status
			r.FetchedStatus = &st
			byName[name] = r
		}
	}
	for name, f := range g.failures {
		r, ok := byName[name]
		if !ok || r.Seed != f.seed || r.Endpoint == nil {
			delete(g.failures, name)
			continue
		}
		r.FetchReason, r.FetchMessage = f.reason, f.message
		byName[name] = r
	}
	g.byName, g.byTD = byName, byTD
	g.mu.Unlock()
	g.readyOnce.Do(func() { close(g.ready) })
}

// SetFetchedBundle makes b, which the bundle endpoint of registration name served at when, the
// bundle the hub trusts for that member at once: it replaces spec.trustBundle (an authority b
// lacks is no longer trusted) until spec.trustBundle changes.
func (g *Registry) SetFetchedBundle(name string, b *spiffebundle.Bundle, when time.Time) error {
	raw, err := b.Marshal()
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.byName[name]
	if !ok || !r.Usable() {
		return fmt.Errorf("FederatedCluster %s is not a usable registration", name)
	}
	if b.TrustDomain() != r.TrustDomain {
		return fmt.Errorf("bundle of trust domain %q for FederatedCluster %s of trust domain %q", b.TrustDomain().Name(), name, r.TrustDomain.Name())
	}
	sb, err := signature.ParseBundle(r.TrustDomain, raw)
	if err != nil {
		return err
	}
	st := v1alpha1.FederatedTrustBundle{Seed: r.Seed, RefreshedAt: metav1.NewTime(when.UTC().Truncate(time.Second)),
		Authorities: int32(len(b.X509Authorities())), Bundle: string(raw)}
	if seq, ok := b.SequenceNumber(); ok && seq <= math.MaxInt64 {
		n := int64(seq)
		st.SequenceNumber = &n
	}
	g.fetched[name] = fetchedBundle{seed: r.Seed, bundle: sb, status: st}
	delete(g.failures, name)
	r.Bundle, r.Fetched, r.FetchedStatus = sb, true, &st
	r.FetchReason, r.FetchMessage = "", ""
	g.byName[name] = r
	return nil
}

// SetFetchFailure records that the bundle endpoint of registration name failed (reason is a
// TrustBundleCurrent reason); the bundle in effect stays.
func (g *Registry) SetFetchFailure(name, reason, message string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.byName[name]
	if !ok {
		return
	}
	g.failures[name] = fetchFailure{seed: r.Seed, reason: reason, message: message}
	r.FetchReason, r.FetchMessage = reason, message
	g.byName[name] = r
}

// WithEndpoints returns the usable registrations that have a bundle endpoint.
func (g *Registry) WithEndpoints() []Registration {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []Registration
	for _, r := range g.byName {
		if r.Endpoint != nil && r.Usable() {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Registration) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Get returns the registration named name.
func (g *Registry) Get(name string) (Registration, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	r, ok := g.byName[name]
	return r, ok
}

// ByTrustDomain returns the usable registration of td.
func (g *Registry) ByTrustDomain(td spiffeid.TrustDomain) (Registration, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	name, ok := g.byTD[td]
	if !ok {
		return Registration{}, false
	}
	return g.byName[name], true
}

// Names lists every registration's name.
func (g *Registry) Names() []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	names := make([]string, 0, len(g.byName))
	for n := range g.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// GetX509BundleForTrustDomain implements x509bundle.Source.
func (g *Registry) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	r, ok := g.ByTrustDomain(td)
	if !ok {
		return nil, fmt.Errorf("trust domain %q is not registered by any FederatedCluster", td.Name())
	}
	return r.Bundle.X509, nil
}
