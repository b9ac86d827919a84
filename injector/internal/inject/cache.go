package inject

import (
	"encoding/json"
	"sync"

	"github.com/kagenti/platform/injector/internal/config"
)

// maxCached bounds a RenderCache: workloads share a handful of option sets, so a full cache means
// something unusual (every workload with its own resource annotations); it starts over then.
const maxCached = 512

// RenderCache keeps what Render returned per (configuration, options but the workload's name and
// service account), so that an admission renders nothing when a workload with the same options was
// admitted under the same configuration: only the parts named after the workload are made per
// admission (Rendered.forWorkload). A new configuration (another *config.Config) empties it. Safe
// for concurrent use. A returned *Rendered shares the cached containers: callers must not modify it
// (Inject copies what it adds).
type RenderCache struct {
	mu      sync.Mutex
	cfg     *config.Config
	entries map[string]*Rendered
}

// Render returns Render(cfg, o), from the cache when it holds o's options. Errors are not cached.
func (c *RenderCache) Render(cfg *config.Config, o Options) (*Rendered, error) {
	shared := o
	shared.Workload, shared.ServiceAccount = "", ""
	key, err := json.Marshal(shared) // the options' exported fields: everything Render reads
	if err != nil {
		return Render(cfg, o)
	}
	c.mu.Lock()
	if c.cfg != cfg || len(c.entries) >= maxCached {
		c.cfg, c.entries = cfg, map[string]*Rendered{}
	}
	r, ok := c.entries[string(key)]
	c.mu.Unlock()
	if !ok {
		if r, err = Render(cfg, shared); err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.cfg == cfg {
			c.entries[string(key)] = r
		}
		c.mu.Unlock()
	}
	return r.forWorkload(cfg, o), nil
}
