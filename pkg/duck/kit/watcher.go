package kit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
)

// Watcher keeps a binary's own configuration, parsed from a file, current without a restart. The
// file is typically a key of a ConfigMap volume: kubelet replaces it by swapping a symlink in the
// mounted directory, so the watcher watches the directory and re-reads the file on any event, and
// also polls as a safety net. A file that fails to parse is logged and the last good value is kept.
type Watcher[T any] struct {
	path     string
	parse    func([]byte) (T, error)
	interval time.Duration
	log      logr.Logger

	current atomic.Pointer[T]
	mu      sync.Mutex
	raw     []byte
	onLoad  []func(T)
	onError []func(error)
}

// NewWatcher loads path once, failing when the first load fails: a binary must not start on a
// configuration it cannot read. Call Run to follow changes.
func NewWatcher[T any](path string, parse func([]byte) (T, error), log logr.Logger) (*Watcher[T], error) {
	w := &Watcher[T]{path: path, parse: parse, interval: 5 * time.Second, log: log}
	if err := w.Reload(); err != nil {
		return nil, err
	}
	return w, nil
}

// SetPollInterval changes how often the file is re-read when no event arrives (default 5s).
func (w *Watcher[T]) SetPollInterval(d time.Duration) { w.interval = d }

// OnLoad registers f to run after every successful load that changed the file's content.
func (w *Watcher[T]) OnLoad(f func(T)) { w.mu.Lock(); w.onLoad = append(w.onLoad, f); w.mu.Unlock() }

// OnError registers f to run after every failed load (the last good value stays current).
func (w *Watcher[T]) OnError(f func(error)) {
	w.mu.Lock()
	w.onError = append(w.onError, f)
	w.mu.Unlock()
}

// Current returns the last good configuration. It is safe for concurrent use and never blocks.
func (w *Watcher[T]) Current() T { return *w.current.Load() }

// Reload re-reads the file now. Unchanged content is not parsed again.
func (w *Watcher[T]) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	raw, err := os.ReadFile(w.path)
	if err == nil && w.current.Load() != nil && bytes.Equal(raw, w.raw) {
		return nil
	}
	var v T
	if err == nil {
		v, err = w.parse(raw)
	}
	if err != nil {
		err = fmt.Errorf("loading %s: %w", w.path, err)
		for _, f := range w.onError {
			f(err)
		}
		return err
	}
	w.raw = raw
	w.current.Store(&v)
	for _, f := range w.onLoad {
		f(v)
	}
	return nil
}

// Run follows the file until ctx ends.
func (w *Watcher[T]) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer fw.Close()
	if err := fw.Add(filepath.Dir(w.path)); err != nil {
		return fmt.Errorf("watching %s: %w", filepath.Dir(w.path), err)
	}
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	reload := func() {
		if err := w.Reload(); err != nil {
			w.log.Error(err, "configuration rejected; keeping the last good one")
		}
	}
	// A change written after NewWatcher's load and before the watch was added sent no event: read
	// the file once now, or it would wait for the next poll.
	reload()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-fw.Events:
			reload()
		case err := <-fw.Errors:
			w.log.Error(err, "watching configuration")
		case <-tick.C:
			reload()
		}
	}
}
