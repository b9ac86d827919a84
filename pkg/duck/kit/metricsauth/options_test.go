package metricsauth

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/pkg/duck/ducktest"
)

// TestMetricsAreNotCompressed: a scraper that offers gzip (Prometheus does) gets plain text, so the
// controller never allocates the handler's gzip writers (about 800 KB of heap each).
func TestMetricsAreNotCompressed(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t))
	srv, err := metricsserver.NewServer(ServerOptions(addr, false), nil, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// The transport must not ask for gzip itself, or it would also undo it transparently.
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	var resp *http.Response
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err = c.Do(req)
		return err == nil, nil
	}), "the metrics endpoint never answered")
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("Content-Encoding"), "the response is compressed")
	assert.True(t, strings.Contains(string(body), "# TYPE "), "not the Prometheus text format: %.200q", body)
}
