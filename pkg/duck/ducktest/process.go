package ducktest

// Measurements of a controller running as its own process, shared by the pillars' load tests
// (KAGENTI_LOAD=1): its API requests from its own metrics, its memory from /proc, the load average.

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Requests counts the controller's API requests by HTTP method.
type Requests map[string]float64

// Sub is r minus o, per method.
func (r Requests) Sub(o Requests) Requests {
	out := Requests{}
	for m, v := range r {
		out[m] = v - o[m]
	}
	return out
}

// Writes counts POST, PUT, PATCH and DELETE.
func (r Requests) Writes() float64 { return r["POST"] + r["PUT"] + r["PATCH"] + r["DELETE"] }

func (r Requests) String() string {
	methods := make([]string, 0, len(r))
	for m := range r {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	parts := make([]string, 0, len(methods))
	for _, m := range methods {
		parts = append(parts, fmt.Sprintf("%s %.0f", m, r[m]))
	}
	return strings.Join(parts, ", ")
}

// PerObject describes r divided over n objects.
func (r Requests) PerObject(n int) string {
	return fmt.Sprintf("%.2f writes (POST %.2f, PATCH %.2f, PUT %.2f, DELETE %.2f), %.2f GETs (reads, lists and watches)",
		r.Writes()/float64(n), r["POST"]/float64(n), r["PATCH"]/float64(n), r["PUT"]/float64(n), r["DELETE"]/float64(n), r["GET"]/float64(n))
}

// MustRequests is APIRequests, failing the test on an error.
func MustRequests(t *testing.T, addr string) Requests {
	t.Helper()
	r, err := APIRequests(addr)
	require.NoError(t, err)
	return r
}

// APIRequests sums rest_client_requests_total from the controller's metrics by method.
func APIRequests(addr string) (Requests, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := Requests{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "rest_client_requests_total{"), "} ")
		if !ok {
			continue
		}
		v, _ := strconv.ParseFloat(value, 64)
		for _, l := range strings.Split(labels, ",") {
			if m, ok := strings.CutPrefix(l, `method="`); ok {
				out[strings.TrimSuffix(m, `"`)] += v
			}
		}
	}
	return out, s.Err()
}

// WaitQuiet waits until the controller has made no API write for quiet (at most limit), and
// returns the writes it made meanwhile: the tail of the work already started (the last status
// writes, Events the broadcaster sends asynchronously), which is not idle activity. Idle writes are
// counted from then on.
func WaitQuiet(t *testing.T, addr string, quiet, limit time.Duration) (Requests, time.Duration) {
	t.Helper()
	start := time.Now()
	first := MustRequests(t, addr)
	last, lastChange := first, start
	for time.Since(lastChange) < quiet && time.Since(start) < limit {
		time.Sleep(time.Second)
		now := MustRequests(t, addr)
		if now.Writes() != last.Writes() {
			last, lastChange = now, time.Now()
		}
	}
	return last.Sub(first), time.Since(start)
}

// ProcStatus reads a memory line (VmRSS, RssAnon, RssFile, VmHWM) of /proc/<pid>/status, in MiB.
func ProcStatus(pid int, key string) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), key+":"); ok {
			var kb float64
			_, _ = fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
			return kb / 1024
		}
	}
	return -1
}

// Loadavg is the machine's 1, 5 and 15 minute load averages, reported next to every timing.
func Loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// Parallel runs f(0..n-1) on workers goroutines and fails the test on the first error.
func Parallel(t *testing.T, n, workers int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// FreePort is a loopback TCP port free at the time of the call, never one it gave before.
func FreePort(t *testing.T) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		// The kernel may give a port it just freed again: two calls in a row (a metrics and a
		// health address) must not get the same one.
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
}

// handedOut are the ports this process's tests were given.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// EnvInt reads a non-negative integer from the environment, def when unset or invalid.
func EnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}
