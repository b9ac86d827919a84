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
	require.Equal(t, first, again)
	require.Same(t, &first.InitContainers[0], &again.InitContainers[0], "same configuration and options: rendered once")

	// Another workload with the same options: the sidecars rendered for the first, the parts named
	// after the workload its own (every workload has its own name: a cache keyed by it served nobody).
	sibling, err := inject.ParseOptions("sibling-agent", map[string]string{inject.LabelSpiffe: "enabled"}, nil)
	require.NoError(t, err)
	sibling.ServiceAccount = "sibling"
	r, err := c.Render(cfg, sibling)
	require.NoError(t, err)
	want, err = inject.Render(cfg, sibling)
	require.NoError(t, err)
	require.Equal(t, want, r, "the cache returns what Render returns, for every workload")
	require.Same(t, &first.InitContainers[0], &r.InitContainers[0], "the sidecars are rendered once for both")
	require.NotEqual(t, first.Hash, r.Hash)
	require.Contains(t, r.IdentityDefaults, "KAGENTI_WORKLOAD=sibling-agent\nKAGENTI_SERVICE_ACCOUNT=sibling\n")
	require.Equal(t, "sibling-agent-trace", r.Volumes[len(r.Volumes)-1].ConfigMap.Name)
	require.Equal(t, "weather-agent-trace", first.Volumes[len(first.Volumes)-1].ConfigMap.Name, "the cached rendering is left as it was")

	other, err := inject.ParseOptions("other-agent", nil, nil)
	require.NoError(t, err)
	r, err = c.Render(cfg, other)
	require.NoError(t, err)
	require.NotSame(t, &first.InitContainers[0], &r.InitContainers[0])
	require.Contains(t, r.IdentityDefaults, "KAGENTI_WORKLOAD=other-agent\n")

	next := config.Default()
	next.Images.Authbridge = "ghcr.io/kagenti/kagenti-authbridge:v0.2.0"
	r, err = c.Render(next, o)
	require.NoError(t, err)
	require.NotSame(t, first, r, "a new configuration renders afresh")
	require.Equal(t, next.Images.Authbridge, r.InitContainers[0].Image)

	// Errors are returned, not cached.
	bad, err := inject.ParseOptions("w", nil, map[string]string{"kagenti.io/authbridge-memory": "1Gi"})
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
