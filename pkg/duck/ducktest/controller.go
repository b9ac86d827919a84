package ducktest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kagenti/platform/pkg/duck/kit/memlimit"
)

// MemoryMaxEnv names the environment variable that runs a load test's controller inside a fresh
// memory cgroup limited to its value (a quantity, e.g. 64Mi): the kernel enforces the limit (the
// controller is OOM-killed above it) and memlimit finds it as it finds a container's.
const MemoryMaxEnv = "KAGENTI_LOAD_MEMORY_MAX"

// Controller is a controller process started by StartController.
type Controller struct {
	Cmd *exec.Cmd
	// Pid is the controller's process ID (its /proc/<pid>/status has its memory).
	Pid int
	// Cgroup is the memory cgroup made for it (MemoryMaxEnv), nil without one.
	Cgroup  *memlimit.Cgroup
	started time.Time
	done    chan struct{}
}

// StartController starts cmd (a controller built by BuildBinary) and stops it when the test ends.
// With MemoryMaxEnv set it first makes a memory cgroup below the test's own, with that limit,
// and starts the controller in it: a shell moves itself into the cgroup and execs the controller,
// so the controller runs there from its first instruction on and reads the limit at its start.
func StartController(t *testing.T, cmd *exec.Cmd) *Controller {
	t.Helper()
	c := &Controller{Cmd: cmd, done: make(chan struct{})}
	if v := os.Getenv(MemoryMaxEnv); v != "" {
		q, err := resource.ParseQuantity(v)
		require.NoError(t, err, "%s=%q", MemoryMaxEnv, v)
		c.Cgroup = newMemoryCgroup(t, q.Value())
		cmd.Args = append([]string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, c.Cgroup.ProcsFile(), cmd.Path}, cmd.Args[1:]...)
		cmd.Path = "/bin/sh"
		t.Logf("controller runs in memory cgroup %s, limit %s (%d bytes)", c.Cgroup.Dir, v, q.Value())
	}
	require.NoError(t, cmd.Start())
	c.Pid, c.started = cmd.Process.Pid, time.Now()
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		if c.Exited() == nil {
			_ = cmd.Process.Kill()
		}
		<-c.done
		if c.Cgroup != nil {
			t.Logf("memory cgroup at end: %s", c.cgroupReport())
			removeCgroup(t, c.Cgroup.Dir)
		}
	})
	return c
}

// Stop kills the controller, if it still runs, and waits until it has exited (the test's cleanup
// does the same; Stop is for a test that starts another controller after this one).
func (c *Controller) Stop() {
	if c.Exited() == nil {
		_ = c.Cmd.Process.Kill()
	}
	<-c.done
}

// Exited is nil while the controller runs, else what ended it (and the cgroup's OOM kills).
func (c *Controller) Exited() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	msg := "the controller exited: " + c.Cmd.ProcessState.String()
	if ws, ok := c.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && c.Cgroup != nil {
		msg += "; " + c.cgroupReport()
	}
	return errors.New(msg)
}

// cgroupReport says how much the cgroup used at most and how often the kernel OOM-killed in it.
func (c *Controller) cgroupReport() string {
	cg := c.Cgroup
	peakFile, oomFile := "memory.max_usage_in_bytes", "memory.oom_control"
	if cg.V2 {
		peakFile, oomFile = "memory.peak", "memory.events"
	}
	peak := "?"
	if b, err := os.ReadFile(filepath.Join(cg.Dir, peakFile)); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			peak = fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		}
	}
	kills := "?"
	if b, err := os.ReadFile(filepath.Join(cg.Dir, oomFile)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
				kills = v
			}
		}
	}
	return fmt.Sprintf("peak usage %s (%s), OOM kills %s", peak, peakFile, kills)
}

// LogGC logs what the controller's Go runtime reports of its garbage collection on its metrics
// endpoint: the soft memory limit it runs with, GC cycles and CPU seconds so far. For the share of
// CPU the GC took, run the controller with GODEBUG=gctrace=1 (KAGENTI_LOAD_ENV): each cycle's line
// carries it ("gc N @Ts P%").
func (c *Controller) LogGC(t *testing.T, metricsAddr string) {
	t.Helper()
	m := scrape(t, metricsAddr, "go_gc_gomemlimit_bytes", "go_gc_gogc_percent", "go_gc_duration_seconds_count", "process_cpu_seconds_total")
	limit := "none"
	if v, ok := m["go_gc_gomemlimit_bytes"]; ok && v < 1<<62 {
		limit = fmt.Sprintf("%.1f MiB", v/(1<<20))
	}
	t.Logf("LOAD controller GC: soft memory limit %s, GOGC %.0f, %.0f GC cycles, %.1f CPU seconds in %v; cgroup: %s",
		limit, m["go_gc_gogc_percent"], m["go_gc_duration_seconds_count"], m["process_cpu_seconds_total"],
		time.Since(c.started).Round(time.Second), c.cgroupSummary())
}

func (c *Controller) cgroupSummary() string {
	if c.Cgroup == nil {
		return "none"
	}
	return c.cgroupReport()
}

// scrape reads the named unlabelled metrics from a controller's metrics endpoint.
func scrape(t *testing.T, addr string, names ...string) map[string]float64 {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	eachMetricLine(t, addr, func(line string) {
		name, v, ok := strings.Cut(line, " ")
		if ok && want[name] {
			f, _ := strconv.ParseFloat(v, 64)
			out[name] = f
		}
	})
	return out
}

// newMemoryCgroup makes a memory cgroup below the test process's own with limit bytes.
// cgroups numbers the memory cgroups this process made.
var cgroups atomic.Int64

func newMemoryCgroup(t *testing.T, limit int64) *memlimit.Cgroup {
	t.Helper()
	own, err := memlimit.OwnCgroup("/")
	require.NoError(t, err, "%s needs the test's own memory cgroup", MemoryMaxEnv)
	cg := own
	// One cgroup per controller: a test may start several, one after the other.
	cg.Dir = filepath.Join(own.Dir, fmt.Sprintf("kagenti-load-%d-%d", os.Getpid(), cgroups.Add(1)))
	require.NoError(t, os.Mkdir(cg.Dir, 0o755), "%s needs a writable memory cgroup (root, cgroup v1 or a delegated v2 subtree)", MemoryMaxEnv)
	if cg.V2 {
		// The memory controller must be enabled for the children of the test's cgroup.
		_ = os.WriteFile(filepath.Join(own.Dir, "cgroup.subtree_control"), []byte("+memory"), 0o644)
	}
	require.NoError(t, os.WriteFile(filepath.Join(cg.Dir, cg.LimitFile), []byte(strconv.FormatInt(limit, 10)), 0o644),
		"setting %s", filepath.Join(cg.Dir, cg.LimitFile))
	return &cg
}

// removeCgroup removes a cgroup once the kernel has let its last process go.
func removeCgroup(t *testing.T, dir string) {
	for range 50 {
		if err := syscall.Rmdir(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("could not remove cgroup %s", dir)
}
