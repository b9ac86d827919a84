package sidecar

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSharedFileKeepsLastGoodContent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "jwt_svid.token")
	check := func(b []byte) error {
		if string(b) == "half" {
			return errors.New("half written")
		}
		return nil
	}
	f := NewSharedFile(path, check)
	_, err := f.Get()
	require.Error(t, err, "nothing written yet")

	require.NoError(t, os.WriteFile(path, []byte("first\n"), 0o640))
	assert.True(t, f.Refresh())
	got, err := f.Get()
	require.NoError(t, err)
	assert.Equal(t, "first", string(got))

	for _, bad := range []string{"", "half"} {
		require.NoError(t, os.WriteFile(path, []byte(bad), 0o640))
		assert.False(t, f.Refresh())
		got, err = f.Get()
		require.NoError(t, err)
		assert.Equal(t, "first", string(got), "a rejected read keeps the previous content")
	}
	require.NoError(t, os.Remove(path))
	f.Refresh()
	got, _ = f.Get()
	assert.Equal(t, "first", string(got))
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, WriteFileAtomic(dir, "client-secret.txt", []byte("s3cret"), 0o640))
	require.NoError(t, WriteFileAtomic(dir, "client-secret.txt", []byte("rotated"), 0o640))
	b, err := os.ReadFile(filepath.Join(dir, "client-secret.txt"))
	require.NoError(t, err)
	assert.Equal(t, "rotated", string(b))
	info, err := os.Stat(filepath.Join(dir, "client-secret.txt"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), info.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left behind")
}
