// Package sidecar is what every kagenti-authbridge role shares: following its configuration and
// the files of the shared volume without a restart, keeping the last good configuration when a
// new one is malformed, and serving /healthz, /readyz and /status.
package sidecar

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// WatchDir calls changed whenever something in dir may have changed, until ctx ends: on fsnotify
// events (debounced), and every poll as a safety net (and as the only source while dir does not
// exist yet, as when an optional ConfigMap volume is still empty). The kubelet updates ConfigMap
// and Secret volumes by swapping a symlink inside the directory, so the directory, not the file,
// is what is watched.
func WatchDir(ctx context.Context, dir string, poll time.Duration, log *zap.Logger, changed func()) {
	const debounce = 50 * time.Millisecond
	var (
		w      *fsnotify.Watcher
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	// watch starts watching dir; it reports whether it did, so that the caller reloads once:
	// whatever changed before the watch was in place is seen too.
	watch := func() bool {
		if w != nil {
			return false
		}
		nw, err := fsnotify.NewWatcher()
		if err != nil {
			log.Warn("cannot watch; polling only", zap.String("dir", dir), zap.Error(err))
			return false
		}
		if err := nw.Add(dir); err != nil {
			nw.Close()
			if !errors.Is(err, fs.ErrNotExist) {
				log.Warn("cannot watch; polling only", zap.String("dir", dir), zap.Error(err))
			}
			return false
		}
		w, events, errs = nw, nw.Events, nw.Errors
		return true
	}
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	if watch() {
		changed()
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
			if fire == nil {
				fire = time.After(debounce)
			}
		case err := <-errs:
			log.Warn("watch error; polling continues", zap.String("dir", dir), zap.Error(err))
		case <-fire:
			fire = nil
			changed()
		case <-tick.C:
			if w == nil {
				watch()
			} else if _, err := os.Stat(dir); err != nil {
				// The directory went away (a test removed it); watch it again when it is back.
				w.Close()
				w, events, errs = nil, nil, nil
			}
			changed()
		}
	}
}
