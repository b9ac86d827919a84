package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func cgroup(t *testing.T, file, content string) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, file)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, file), []byte(content), 0o644))
	return root
}

func TestContainerLimit(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                int64
	}{
		{"cgroup v2", "memory.max", "268435456\n", 256 << 20},
		{"cgroup v2 unlimited", "memory.max", "max\n", 0},
		{"cgroup v1", "memory/memory.limit_in_bytes", "134217728\n", 128 << 20},
		{"cgroup v1 unlimited", "memory/memory.limit_in_bytes", "9223372036854771712\n", 0},
		{"no memory controller", "cpu.max", "max 100000\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ContainerLimit(cgroup(t, tc.file, tc.content))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := ContainerLimit(cgroup(t, "memory.max", "lots\n"))
	assert.ErrorContains(t, err, "memory.max")
}

// keepLimit restores the process's memory limit after a test that sets it.
func keepLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
}

func TestSetFollowsTheContainerLimit(t *testing.T) {
	keepLimit(t)
	t.Setenv("GOMEMLIMIT", "")
	debug.SetMemoryLimit(math.MaxInt64)
	limit, why, err := Set(cgroup(t, "memory.max", "268435456\n"))
	require.NoError(t, err)
	container := float64(256 << 20)
	assert.Equal(t, int64(container*Fraction), limit)
	assert.Equal(t, limit, debug.SetMemoryLimit(-1), "the runtime has the limit")
	assert.Contains(t, why, "256 MiB")
}

func TestSetLeavesGOMEMLIMITAndUnlimitedContainersAlone(t *testing.T) {
	keepLimit(t)
	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "50MiB")
	limit, why, err := Set(cgroup(t, "memory.max", "268435456\n"))
	require.NoError(t, err)
	assert.Zero(t, limit)
	assert.Contains(t, why, "GOMEMLIMIT=50MiB")
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "untouched")

	t.Setenv("GOMEMLIMIT", "")
	limit, _, err = Set(cgroup(t, "memory.max", "max\n"))
	require.NoError(t, err)
	assert.Zero(t, limit)
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "untouched")
}
