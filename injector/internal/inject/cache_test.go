package inject_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
)

func TestRenderCache(t *testing.T) {
	var c inject.RenderCache
	cfg := config.Default()
	o, err := inject.ParseOptions("weather-agent", map[string]string{inject.LabelSpiffe: "enabled"}, nil)
	require.NoError(t, err)

	first, err := c.Render(cfg, o)
	require.NoError(t, err)
	want, err := inject.Render(cfg, o)
	require.NoError(t, err)
	require.Equal(t, want, first, "the cache returns what Render returns")
	again, err := c.Render(cfg, o)
	require.NoError(t, err)
	require.Same(t, first, again, "same configuration and options: rendered once")

	other, err := inject.ParseOptions("other-agent", nil, nil)
	require.NoError(t, err)
	r, err := c.Render(cfg, other)
	require.NoError(t, err)
	require.NotSame(t, first, r)
	require.Contains(t, r.IdentityDefaults, "KAGENTI_WORKLOAD=other-agent\n")

	next := config.Default()
	next.Images.Authbridge = "ghcr.io/kagenti/kagenti-authbridge:v0.2.0"
	r, err = c.Render(next, o)
	require.NoError(t, err)
	require.NotSame(t, first, r, "a new configuration renders afresh")
	require.Equal(t, next.Images.Authbridge, r.InitContainers[0].Image)

	// Errors are returned, not cached.
	bad, err := inject.ParseOptions("w", nil, map[string]string{"kagenti.io/envoy-proxy-memory": "1Gi"})
	require.NoError(t, err)
	for range 2 {
		_, err = c.Render(cfg, bad)
		var invalid *inject.InvalidError
		require.ErrorAs(t, err, &invalid)
	}

	// Concurrent admissions share it (run with -race).
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			cur := cfg
			if i%2 == 1 {
				cur = next
			}
			for range 50 {
				r, err := c.Render(cur, o)
				if err != nil || r.InitContainers[0].Image != cur.Images.Authbridge {
					t.Errorf("rendered %v, %v", r, err)
				}
			}
		})
	}
	wg.Wait()
}
