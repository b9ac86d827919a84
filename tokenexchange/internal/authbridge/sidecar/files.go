package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// SharedFile keeps the content of one file of the shared volume that another sidecar writes (the
// JWT SVID, the client credentials). Refresh re-reads it; a read that fails or that check rejects
// (spiffe-helper rewrites its file in place, so a reader may see it half written) keeps the
// previous content.
type SharedFile struct {
	Path  string
	check func([]byte) error

	mu      sync.RWMutex
	content []byte
	err     error
}

// NewSharedFile follows path; check (optional) accepts or rejects a content.
func NewSharedFile(path string, check func([]byte) error) *SharedFile {
	f := &SharedFile{Path: path, check: check, err: fmt.Errorf("%s: not read yet", path)}
	f.Refresh()
	return f
}

// Refresh reads the file now and reports whether its content changed.
func (f *SharedFile) Refresh() bool {
	b, err := os.ReadFile(f.Path)
	if err == nil {
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			err = fmt.Errorf("%s is empty", f.Path)
		} else if f.check != nil {
			if cerr := f.check(b); cerr != nil {
				err = fmt.Errorf("%s: %w", f.Path, cerr)
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if f.content == nil {
			f.err = err
		}
		return false
	}
	changed := !bytes.Equal(b, f.content)
	f.content, f.err = b, nil
	return changed
}

// Get returns the last good content, or why there is none yet.
func (f *SharedFile) Get() ([]byte, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.content, f.err
}

// WriteFileAtomic replaces dir/name with data: readers see the old or the new content, never a
// part. The temporary file lives in dir so that the rename stays on one filesystem.
func WriteFileAtomic(dir, name string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Chmod(mode)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return errors.Join(fmt.Errorf("writing %s", filepath.Join(dir, name)), werr)
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, name))
}
