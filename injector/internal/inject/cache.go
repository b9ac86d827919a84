package inject

import (
	"encoding/json"
	"sync"

	"github.com/kagenti/platform/injector/internal/config"
)

// maxCached bounds a RenderCache: workloads share a handful of option sets, so a full cache means
// something unusual (every workload with its own resource annotations); it starts over then.
const maxCached = 512

// RenderCache keeps what Render returned per (configuration, options), so that an admission
// renders nothing when another workload with the same options was admitted under the same
// configuration. A new configuration (another *config.Config) empties it. Safe for concurrent
// use. A cached *Rendered is shared: callers must not modify it (Inject copies what it adds).
type RenderCache struct {
	mu      sync.Mutex
	cfg     *config.Config
	entries map[string]*Rendered
}

// Render returns Render(cfg, o), from the cache when it holds it. Errors are not cached.
func (c *RenderCache) Render(cfg *config.Config, o Options) (*Rendered, error) {
	key, err := json.Marshal(o) // the options' exported fields: everything Render reads
	if err != nil {
		return Render(cfg, o)
	}
	c.mu.Lock()
	if c.cfg != cfg || len(c.entries) >= maxCached {
		c.cfg, c.entries = cfg, map[string]*Rendered{}
	}
	r, ok := c.entries[string(key)]
	c.mu.Unlock()
	if ok {
		return r, nil
	}
	r, err = Render(cfg, o)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.cfg == cfg {
		c.entries[string(key)] = r
	}
	c.mu.Unlock()
	return r, nil
}
