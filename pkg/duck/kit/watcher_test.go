package kit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type testConfig struct{ Image string }

func parseTestConfig(b []byte) (testConfig, error) {
	s := strings.TrimSpace(string(b))
	if !strings.HasPrefix(s, "image=") {
		return testConfig{}, errors.New("want image=<ref>")
	}
	return testConfig{Image: strings.TrimPrefix(s, "image=")}, nil
}

// writeLikeKubelet replaces a ConfigMap volume's content the way kubelet does: a new timestamped
// directory, then an atomic swap of the ..data symlink the key's symlink points through.
func writeLikeKubelet(t *testing.T, dir, content string) {
	t.Helper()
	ts := filepath.Join(dir, "..ts-"+time.Now().Format("150405.000000000"))
	require.NoError(t, os.Mkdir(ts, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ts, "config"), []byte(content), 0o644))
	tmp := filepath.Join(dir, "..data_tmp")
	require.NoError(t, os.Symlink(filepath.Base(ts), tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "..data")))
	if _, err := os.Lstat(filepath.Join(dir, "config")); os.IsNotExist(err) {
		require.NoError(t, os.Symlink(filepath.Join("..data", "config"), filepath.Join(dir, "config")))
	}
}

func TestWatcherFollowsConfigMapVolumeUpdates(t *testing.T) {
	dir := t.TempDir()
	writeLikeKubelet(t, dir, "image=sidecar:v1")

	w, err := NewWatcher(filepath.Join(dir, "config"), parseTestConfig, logr.Discard())
	require.NoError(t, err)
	w.SetPollInterval(time.Hour) // prove the file events alone are enough
	var loads, failures atomic.Int32
	w.OnLoad(func(testConfig) { loads.Add(1) })
	w.OnError(func(error) { failures.Add(1) })
	assert.Equal(t, "sidecar:v1", w.Current().Image)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()

	// Written before or after Run added its watch (Run reads the file once after adding it); the
	// writes after this one are seen through the watch alone, since it is in place once v2 is.
	writeLikeKubelet(t, dir, "image=sidecar:v2")
	require.Eventually(t, func() bool { return w.Current().Image == "sidecar:v2" }, 10*time.Second, 20*time.Millisecond)

	// An invalid file is rejected and the last good configuration stays current.
	writeLikeKubelet(t, dir, "garbage")
	require.Eventually(t, func() bool { return failures.Load() > 0 }, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, "sidecar:v2", w.Current().Image)

	writeLikeKubelet(t, dir, "image=sidecar:v3")
	require.Eventually(t, func() bool { return w.Current().Image == "sidecar:v3" }, 10*time.Second, 20*time.Millisecond)
	assert.GreaterOrEqual(t, loads.Load(), int32(2))
}

// TestWatcherSeesAChangeBeforeRun: kubelet may update the volume between the binary's first load
// (NewWatcher) and the watch being added (Run); that change sent no event to anyone, and must not
// wait for the next poll (5 s by default; an hour here, so only the fix can pass). Before the fix,
// TestWatcherFollowsConfigMapVolumeUpdates relied on a 100 ms "let the watch start" sleep, which a
// loaded machine can outlast.
func TestWatcherSeesAChangeBeforeRun(t *testing.T) {
	dir := t.TempDir()
	writeLikeKubelet(t, dir, "image=sidecar:v1")
	w, err := NewWatcher(filepath.Join(dir, "config"), parseTestConfig, logr.Discard())
	require.NoError(t, err)
	w.SetPollInterval(time.Hour)
	writeLikeKubelet(t, dir, "image=sidecar:v2") // before Run: no watch yet

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()
	require.Eventually(t, func() bool { return w.Current().Image == "sidecar:v2" }, 10*time.Second, 20*time.Millisecond)
}

func TestWatcherPollsWithoutEvents(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	require.NoError(t, os.WriteFile(path, []byte("image=a:1"), 0o644))
	w, err := NewWatcher(path, parseTestConfig, logr.Discard())
	require.NoError(t, err)
	// Reload is what the poll calls: unchanged content is not re-parsed, a change is picked up.
	var loads atomic.Int32
	w.OnLoad(func(testConfig) { loads.Add(1) })
	require.NoError(t, w.Reload())
	assert.Zero(t, loads.Load())
	require.NoError(t, os.WriteFile(path, []byte("image=a:2"), 0o644))
	require.NoError(t, w.Reload())
	assert.Equal(t, "a:2", w.Current().Image)
	assert.EqualValues(t, 1, loads.Load())
}

func TestWatcherRefusesToStartOnBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(path, []byte("nonsense"), 0o644))
	_, err := NewWatcher(path, parseTestConfig, logr.Discard())
	assert.ErrorContains(t, err, "want image=<ref>")
	_, err = NewWatcher(filepath.Join(t.TempDir(), "missing"), parseTestConfig, logr.Discard())
	assert.ErrorContains(t, err, "no such file")
}
