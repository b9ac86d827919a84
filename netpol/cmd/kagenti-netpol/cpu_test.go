package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// cpuSeconds is the controller's own CPU time (user + system), from the process_cpu_seconds_total
// of its metrics endpoint: the work it did, whatever else the machine was running meanwhile.
func cpuSeconds(t *testing.T, metricsAddr string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Logf("metrics: %v", err)
		return -1
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// startCPUProfile profiles the controller's CPU for seconds from now into the file
// KAGENTI_LOAD_CPUPROFILE names (for `go tool pprof <file>`), in the background; nothing when it is
// unset. The returned function waits for the profile to be written.
func startCPUProfile(t *testing.T, pprofAddr string, seconds int) (wait func()) {
	t.Helper()
	path := os.Getenv("KAGENTI_LOAD_CPUPROFILE")
	if path == "" {
		return func() {}
	}
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
		t.Logf("CPU profile (%d s from the controller's start): %s", seconds, path)
	}
}
