package outbound

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Resolver looks up the addresses of a name; *net.Resolver is one. The sidecar runs as the proxy
// UID, which proxy-init leaves out of the redirect, so its lookups go to the pod's DNS server
// directly, through the pod's resolv.conf (the same search domains as the agent's).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// routeName returns the name a request's route is chosen by: the name in its Host header when that
// name is the connection's real destination address or resolves to it, else the destination
// address itself. The Host header's port never counts: the destination's is the real one.
//
// The Host header is the client's word; the destination is where the bytes go. A Host naming a
// pass-through host or the identity provider on a connection to anywhere else would otherwise make
// the request leave with the caller's token.
func (p *Proxy) routeName(host string, dst netip.AddrPort) string {
	addr := dst.Addr().Unmap()
	name := hostName(host)
	if name == "" {
		return addr.String()
	}
	if mayBeAddress(name) {
		if _, err := netip.ParseAddr(name); err == nil {
			// An address in the Host header is taken for what it is only when it is the
			// destination, which then decides by itself.
			return addr.String()
		}
	}
	if p.names.resolvesTo(p.Resolver, name, addr) {
		return name
	}
	return addr.String()
}

// mayBeAddress is false for names that are no IP address (no ':', a character other than digits and
// dots), so that the common case parses nothing.
func mayBeAddress(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c == ':' || c != '.' && (c < '0' || c > '9') {
			return c == ':'
		}
	}
	return true
}

// hostName returns the host of a Host header without its port, in lower case, without brackets or a
// trailing dot.
func hostName(host string) string {
	name := host
	if strings.IndexByte(host, ':') >= 0 {
		if h, _, err := net.SplitHostPort(host); err == nil {
			name = h
		}
	}
	name = strings.TrimSuffix(strings.Trim(name, "[]"), ".")
	for i := 0; i < len(name); i++ {
		if 'A' <= name[i] && name[i] <= 'Z' {
			return strings.ToLower(name)
		}
	}
	return name
}

// Lookups of Host names: an answer is trusted for nameTTL (Envoy's default DNS refresh rate is 5 s;
// Go's resolver does not report record TTLs); a destination the cached answer does not list is
// looked up again once the answer is nameRetry old, so that a headless service's new pod is
// recognised, while a stream of requests with a forged Host costs at most one lookup a second per
// name. A failed lookup counts as an empty answer.
const (
	nameTTL           = 5 * time.Second
	nameRetry         = time.Second
	nameLookupTimeout = 2 * time.Second
	maxNames          = 4096
)

// nameCache remembers what names resolved to; concurrent lookups of one name share one query.
type nameCache struct {
	now   func() time.Time
	mu    sync.RWMutex
	names map[string]resolved
	group singleflight.Group
}

type resolved struct {
	addrs []netip.Addr // unmapped
	at    time.Time
}

func newNameCache() *nameCache {
	return &nameCache{now: time.Now, names: map[string]resolved{}}
}

// resolvesTo reports whether name resolves to addr (an unmapped address).
func (c *nameCache) resolvesTo(r Resolver, name string, addr netip.Addr) bool {
	now := c.now()
	c.mu.RLock()
	e, ok := c.names[name]
	c.mu.RUnlock()
	if ok {
		age := now.Sub(e.at)
		if found := slices.Contains(e.addrs, addr); age < nameTTL && (found || age < nameRetry) {
			return found
		}
	}
	return slices.Contains(c.query(r, name, now).addrs, addr)
}

// lookup returns the addresses name resolves to (unmapped), from the cache while its answer is
// fresh: the explicit proxy's destination, which routeName then finds in the cache.
func (c *nameCache) lookup(r Resolver, name string) []netip.Addr {
	now := c.now()
	c.mu.RLock()
	e, ok := c.names[name]
	c.mu.RUnlock()
	if ok && now.Sub(e.at) < nameTTL {
		return e.addrs
	}
	return c.query(r, name, now).addrs
}

// query looks name up and caches the answer; concurrent queries of one name share one lookup. A
// caller that found no usable answer at missedAt takes one stored since: a lookup that finished
// between its look at the cache and its query is the newest answer there is (without this, a
// request arriving just as a shared lookup ends made a second one).
func (c *nameCache) query(r Resolver, name string, missedAt time.Time) resolved {
	v, _, _ := c.group.Do(name, func() (any, error) {
		c.mu.RLock()
		cached, ok := c.names[name]
		c.mu.RUnlock()
		if ok && !cached.at.Before(missedAt) {
			return cached, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), nameLookupTimeout)
		defer cancel()
		addrs, err := r.LookupNetIP(ctx, "ip", name)
		if err != nil {
			addrs = nil
		}
		for i, a := range addrs {
			addrs[i] = a.Unmap().WithZone("")
		}
		e := resolved{addrs: addrs, at: c.now()}
		c.store(name, e)
		return e, nil
	})
	return v.(resolved)
}

// store keeps e, making room when the cache is full: first by dropping expired answers, then
// arbitrary ones (a client cycling through names only evicts answers it can make again).
func (c *nameCache) store(name string, e resolved) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.names[name]; !ok && len(c.names) >= maxNames {
		now := c.now()
		for n, old := range c.names {
			if now.Sub(old.at) >= nameTTL {
				delete(c.names, n)
			}
		}
		for n := range c.names {
			if len(c.names) < maxNames {
				break
			}
			delete(c.names, n)
		}
	}
	c.names[name] = e
}
