package ducktest

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// GoMemStats scrapes the go_memstats_*_bytes gauges from a controller's metrics endpoint, in MiB,
// keyed by the name between the prefix and the suffix (heap_inuse, next_gc, sys, …).
func GoMemStats(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	eachMetricLine(t, addr, func(line string) {
		rest, ok := strings.CutPrefix(line, "go_memstats_")
		if !ok {
			return
		}
		if name, v, ok := strings.Cut(rest, "_bytes "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			out[name] = f / (1 << 20)
		}
	})
	return out
}

// eachMetricLine calls f with every line of a controller's metrics endpoint (plain HTTP, the
// text format); an endpoint that does not answer is logged and yields nothing.
func eachMetricLine(t *testing.T, addr string, f func(line string)) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Logf("metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		f(s.Text())
	}
}

// SaveHeapProfile writes a controller's heap profile (after a GC) from its pprof endpoint to the
// file KAGENTI_LOAD_PROFILE names, for `go tool pprof -sample_index=inuse_space <file>`; nothing
// when it is unset.
func SaveHeapProfile(t *testing.T, pprofAddr string) {
	t.Helper()
	path := os.Getenv("KAGENTI_LOAD_PROFILE")
	if path == "" {
		return
	}
	resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/heap?gc=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	require.NoError(t, err)
	t.Logf("heap profile: %s", path)
}

// EnvDuration reads a duration from the environment, def when unset or invalid.
func EnvDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// BuildBinary builds the main package in the working directory (a load test's own cmd/ package)
// into dir/name as its Dockerfile does — static, trimmed, stripped — and logs its size.
func BuildBinary(t *testing.T, dir, name string) string {
	t.Helper()
	return BuildPackage(t, dir, name, ".")
}

// BuildPackage is BuildBinary for the main package pkg (a path relative to the working directory,
// such as ../kagenti-<other binary>).
func BuildPackage(t *testing.T, dir, name, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-tags", BuildTags(), "-trimpath", "-ldflags", "-s -w", "-o", bin, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	require.NoError(t, build.Run(), "building %s", name)
	if fi, err := os.Stat(bin); err == nil {
		t.Logf("binary %s: %.1f MiB", name, float64(fi.Size())/(1<<20))
	}
	return bin
}

// BuildTags are the build tags every shipped binary is built with (hack/go-build-tags, read by the
// Dockerfile, hack/images.sh and the Makefile too).
func BuildTags() string {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "hack", "go-build-tags"))
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(b))
}

// RepoRoot is the repository's root directory (this package sits three levels below it, as every
// load test's cmd/<binary> package does).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}
