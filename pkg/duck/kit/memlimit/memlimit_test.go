package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fsTree writes files (path → content, paths from the file system's root) under a new directory
// and returns it.
func fsTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for path, content := range files {
		p := filepath.Join(root, path)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
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
			got, err := ContainerLimit(fsTree(t, map[string]string{tc.file: tc.content}))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := ContainerLimit(fsTree(t, map[string]string{"memory.max": "lots\n"}))
	assert.ErrorContains(t, err, "memory.max")
}

// The mountinfo lines of the cgroup mounts, as proc(5) writes them.
const (
	mountinfoV1 = `22 1 0:21 / / rw,relatime - overlay overlay rw
30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	// A container without a cgroup namespace: its own cgroup is the root of the mount.
	mountinfoV1Docker = `30 22 0:27 / /sys/fs/cgroup ro - tmpfs tmpfs rw,mode=755
34 30 0:31 /docker/0123abcd /sys/fs/cgroup/memory ro,nosuid master:12 - cgroup cgroup rw,memory
`
	mountinfoV2 = `22 1 0:21 / / rw - overlay overlay rw
30 22 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
`
)

func TestLimitFromTheProcessCgroup(t *testing.T) {
	for _, tc := range []struct {
		name     string
		files    map[string]string
		want     int64
		wantFrom string
	}{{
		name: "cgroup v1, no cgroup namespace, a cgroup made below the process's (this machine)",
		files: map[string]string{
			"proc/self/cgroup":                                                 "9:name=systemd:/\n4:memory:/process_api/feb6/load\n1:cpu,cpuacct:/\n0::/\n",
			"proc/self/mountinfo":                                              mountinfoV1,
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                       "9223372036854771712\n",
			"sys/fs/cgroup/memory/process_api/feb6/memory.limit_in_bytes":      "9223372036854771712\n",
			"sys/fs/cgroup/memory/process_api/feb6/load/memory.limit_in_bytes": "67108864\n",
		},
		want: 64 << 20, wantFrom: "/sys/fs/cgroup/memory/process_api/feb6/load/memory.limit_in_bytes",
	}, {
		name: "cgroup v1, the container's cgroup mounted as the root",
		files: map[string]string{
			"proc/self/cgroup":                           "12:memory:/docker/0123abcd\n",
			"proc/self/mountinfo":                        mountinfoV1Docker,
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "134217728\n",
		},
		want: 128 << 20, wantFrom: "/sys/fs/cgroup/memory/memory.limit_in_bytes",
	}, {
		name: "cgroup v2 with a cgroup namespace",
		files: map[string]string{
			"proc/self/cgroup":            "0::/\n",
			"proc/self/mountinfo":         mountinfoV2,
			"sys/fs/cgroup/memory.max":    "268435456\n",
			"sys/fs/cgroup/cpu.max":       "max 100000\n",
			"sys/fs/cgroup/memory.events": "oom_kill 0\n",
		},
		want: 256 << 20, wantFrom: "/sys/fs/cgroup/memory.max",
	}, {
		name: "cgroup v2 without a namespace: the pod's limit binds the container without one",
		files: map[string]string{
			"proc/self/cgroup":                                 "0::/kubepods.slice/pod1/ctr\n",
			"proc/self/mountinfo":                              mountinfoV2,
			"sys/fs/cgroup/kubepods.slice/memory.max":          "max\n",
			"sys/fs/cgroup/kubepods.slice/pod1/memory.max":     "314572800\n",
			"sys/fs/cgroup/kubepods.slice/pod1/ctr/memory.max": "max\n",
		},
		want: 300 << 20, wantFrom: "/sys/fs/cgroup/kubepods.slice/pod1/memory.max",
	}, {
		name: "the smallest limit on the way up",
		files: map[string]string{
			"proc/self/cgroup":             "0::/a/b\n",
			"proc/self/mountinfo":          mountinfoV2,
			"sys/fs/cgroup/a/memory.max":   "268435456\n",
			"sys/fs/cgroup/a/b/memory.max": "536870912\n",
		},
		want: 256 << 20, wantFrom: "/sys/fs/cgroup/a/memory.max",
	}, {
		name: "no limit anywhere",
		files: map[string]string{
			"proc/self/cgroup":           "0::/a\n",
			"proc/self/mountinfo":        mountinfoV2,
			"sys/fs/cgroup/a/memory.max": "max\n",
		},
	}, {
		name: "no /proc: the cgroup at /sys/fs/cgroup",
		files: map[string]string{
			"sys/fs/cgroup/memory.max": "268435456\n",
		},
		want: 256 << 20, wantFrom: "sys/fs/cgroup",
	}, {
		name: "no memory hierarchy mounted: the cgroup at /sys/fs/cgroup",
		files: map[string]string{
			"proc/self/cgroup":                           "4:memory:/x\n",
			"proc/self/mountinfo":                        "22 1 0:21 / / rw - overlay overlay rw\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "134217728\n",
		},
		want: 128 << 20, wantFrom: "sys/fs/cgroup",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			root := fsTree(t, tc.files)
			got, from, err := Limit(root)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			if tc.want != 0 {
				assert.True(t, strings.HasSuffix(from, tc.wantFrom), "%s read from %s", tc.wantFrom, from)
			}
		})
	}
}

func TestLimitNamesAnUnreadableFile(t *testing.T) {
	_, _, err := Limit(fsTree(t, map[string]string{
		"proc/self/cgroup":           "0::/a\n",
		"proc/self/mountinfo":        mountinfoV2,
		"sys/fs/cgroup/a/memory.max": "lots\n",
	}))
	assert.ErrorContains(t, err, "a/memory.max")
}

func TestMountinfoEscapes(t *testing.T) {
	m := parseMountinfo([]byte(`34 30 0:31 /a\040b /sys/fs/cgroup/mem\134ory rw - cgroup cgroup rw,memory` + "\n"))
	require.Len(t, m, 1)
	assert.Equal(t, "/a b", m[0].root)
	assert.Equal(t, `/sys/fs/cgroup/mem\ory`, m[0].mountPoint)
}

// TestOwnCgroupOnThisMachine reads the real /proc: the cgroup found is the one the kernel lists
// this process in.
func TestOwnCgroupOnThisMachine(t *testing.T) {
	if _, err := os.Stat("/proc/self/cgroup"); err != nil {
		t.Skip("no /proc/self/cgroup")
	}
	cg, err := OwnCgroup("/")
	if err == errNoCgroup {
		t.Skip("no memory cgroup mounted here")
	}
	require.NoError(t, err)
	procs, err := os.ReadFile(cg.ProcsFile())
	require.NoError(t, err)
	assert.True(t, slices.Contains(strings.Fields(string(procs)), strconv.Itoa(os.Getpid())), "%s lists this process", cg.ProcsFile())
	_, err = os.Stat(filepath.Join(cg.Dir, cg.LimitFile))
	assert.NoError(t, err)
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
	limit, why, err := Set(fsTree(t, map[string]string{"sys/fs/cgroup/memory.max": "268435456\n"}))
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
	limit, why, err := Set(fsTree(t, map[string]string{"sys/fs/cgroup/memory.max": "268435456\n"}))
	require.NoError(t, err)
	assert.Zero(t, limit)
	assert.Contains(t, why, "GOMEMLIMIT=50MiB")
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "untouched")

	t.Setenv("GOMEMLIMIT", "")
	limit, _, err = Set(fsTree(t, map[string]string{"sys/fs/cgroup/memory.max": "max\n"}))
	require.NoError(t, err)
	assert.Zero(t, limit)
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "untouched")
}
