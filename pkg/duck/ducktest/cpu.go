package ducktest

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// CPUSeconds is the user+system CPU time process pid has used, from /proc/<pid>/stat (fields 14
// and 15, in clock ticks of 1/100 s on Linux): the work a controller did, whatever else the
// machine ran meanwhile. -1 when unreadable.
func CPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from after it.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return -1
	}
	var utime, stime float64
	_, _ = fmt.Sscan(f[11], &utime)
	_, _ = fmt.Sscan(f[12], &stime)
	return (utime + stime) / 100
}

// StartCPUProfile records a controller's CPU profile over the next KAGENTI_LOAD_CPU_SECONDS
// (default 20) seconds into the file KAGENTI_LOAD_CPUPROFILE names, for `go tool pprof <file>`, in
// the background; nothing when that variable is unset. The returned function waits until the
// profile is written.
func StartCPUProfile(t *testing.T, pprofAddr string) (wait func()) {
	t.Helper()
	path := os.Getenv("KAGENTI_LOAD_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	seconds := EnvInt("KAGENTI_LOAD_CPU_SECONDS", 20)
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, seconds))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET /debug/pprof/profile: %s", resp.Status)
			}
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(f, resp.Body)
			return err
		}()
	}()
	return func() {
		if err := <-done; err != nil {
			t.Logf("CPU profile: %v", err)
			return
		}
		t.Logf("CPU profile (%d s): %s", seconds, path)
	}
}
