package testsh

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The stand-ins for the suites hack/test.sh runs: each records its pid, and the signal that stopped
// it, in $MARKS, then runs until stopped (sleep in the background and wait: a trap runs at once).
const (
	// fakeMake stands for `make verify-generate lint build` (FAKE_BUILD=fail fails it), which ends
	// only once the kind suite has started, and for `make unit render`: FAKE_UNIT=fail fails at once,
	// done succeeds.
	fakeMake = `#!/usr/bin/env bash
if [[ " $* " == *" build "* ]]; then
  until [[ -e "${MARKS}/kind.pid" ]]; do sleep 0.05; done
  echo "$*" > "${MARKS}/build.args"
  [[ "${FAKE_BUILD}" == fail ]] && exit 2
  exit 0
fi
trap 'echo TERM > "${MARKS}/unit.stopped"; exit 143' TERM
echo $$ > "${MARKS}/unit.pid"
# It fails only once the kind suite is running, as a real failure does.
until [[ -e "${MARKS}/kind.pid" ]]; do sleep 0.05; done
case "${FAKE_UNIT}" in fail) exit 1 ;; done) exit 0 ;; esac
sleep 300 & wait $!
`
	fakeLocal = `#!/usr/bin/env bash
echo $$ > "${MARKS}/local.pid"
exit 0
`
	// fakeKind stands for hack/kind.sh: FAKE_KIND=done waits for the build to be done (the file
	// KAGENTI_KIND_AFTER names), as its tests do, then ends with success.
	fakeKind = `#!/usr/bin/env bash
trap 'echo TERM > "${MARKS}/kind.stopped"; exit 143' TERM
echo "[kind] stage up: 1 s"
echo $$ > "${MARKS}/kind.pid"
if [[ "${FAKE_KIND}" == done ]]; then
  until [[ -e "${KAGENTI_KIND_AFTER}" ]]; do sleep 0.05; done
  touch "${MARKS}/kind.after-build"
  exit 0
fi
sleep 300 & wait $!
`
)

type run struct {
	cmd   *exec.Cmd
	marks string
	out   *output
	done  chan error
}

// output is the script's output, read while it runs.
type output struct {
	mu sync.Mutex
	b  strings.Builder
}

func (o *output) Write(p []byte) (int, error) { o.mu.Lock(); defer o.mu.Unlock(); return o.b.Write(p) }
func (o *output) String() string              { o.mu.Lock(); defer o.mu.Unlock(); return o.b.String() }

// start runs a copy of hack/test.sh in a tree of its own whose hack/kind.sh, hack/local.sh and
// $MAKE are the stand-ins.
func start(t *testing.T, env ...string) *run {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	script, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "test.sh"))
	if err != nil {
		t.Fatal(err)
	}
	root, marks := t.TempDir(), t.TempDir()
	write := func(path, body string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "hack", "test.sh"), string(script))
	write(filepath.Join(root, "hack", "kind.sh"), fakeKind)
	write(filepath.Join(root, "hack", "local.sh"), fakeLocal)
	write(filepath.Join(root, "fake-make"), fakeMake)

	r := &run{marks: marks, out: &output{}, done: make(chan error, 1)}
	r.cmd = exec.Command(filepath.Join(root, "hack", "test.sh"))
	r.cmd.Env = append(os.Environ(), append([]string{"MAKE=" + filepath.Join(root, "fake-make"), "MARKS=" + marks, "KAGENTI_TEST_SERIAL=0"}, env...)...)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	// A process group of its own, so that the test can clean up whatever is left.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		for _, name := range []string{"unit", "kind"} {
			if pid := r.pid(name); pid > 0 {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	})
	return r
}

func (r *run) pid(name string) int {
	b, err := os.ReadFile(filepath.Join(r.marks, name+".pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func (r *run) has(name string) bool {
	_, err := os.Stat(filepath.Join(r.marks, name))
	return err == nil
}

// eventually polls cond for up to a minute: the stand-ins run for five.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: did not happen", what)
		}
	}
}

// exit waits for the script's exit code.
func (r *run) exit(t *testing.T) int {
	t.Helper()
	select {
	case err := <-r.done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(time.Minute):
		t.Fatalf("hack/test.sh did not end; output:\n%s", r.out.String())
		return -1
	}
}

func gone(pid int) bool { return syscall.Kill(pid, 0) != nil }

// TestTERMToTheScriptStopsBothSuites: a TERM sent to hack/test.sh alone (as a CI runner's timeout
// sends it) stops the foreground suite and the kind suite at once, each as a process group, and
// the script exits 130. bash runs a trap only after the command it waits on: with the suite in the
// foreground, the script would go on until the whole suite had ended.
func TestTERMToTheScriptStopsBothSuites(t *testing.T) {
	r := start(t)
	eventually(t, "both suites running", func() bool { return r.pid("unit") > 0 && r.pid("kind") > 0 })
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.exit(t); code != 130 {
		t.Fatalf("exit %d, want 130; output:\n%s", code, r.out.String())
	}
	for _, name := range []string{"unit", "kind"} {
		if !r.has(name + ".stopped") {
			t.Errorf("the %s stand-in was not sent TERM; output:\n%s", name, r.out.String())
		}
		eventually(t, name+" gone", func() bool { return gone(r.pid(name)) })
	}
	if r.has("local.pid") {
		t.Error("the local e2e started after the stop")
	}
}

// TestAFailingForegroundSuiteStopsTheKindSuite: unit failing stops the kind suite (which removes
// its cluster in its own exit trap), and the script exits with the failure's code.
func TestAFailingForegroundSuiteStopsTheKindSuite(t *testing.T) {
	r := start(t, "FAKE_UNIT=fail")
	if code := r.exit(t); code != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s", code, r.out.String())
	}
	if !r.has("kind.stopped") {
		t.Errorf("the kind suite was not stopped; output:\n%s", r.out.String())
	}
	if !strings.Contains(r.out.String(), "kind suite log (stopped)") {
		t.Errorf("the kind suite's log is not shown; output:\n%s", r.out.String())
	}
}

// TestBothSuitesPassing: unit, the local e2e and the kind suite pass; the script prints the kind
// suite's log and exits 0.
func TestBothSuitesPassing(t *testing.T) {
	r := start(t, "FAKE_UNIT=done", "FAKE_KIND=done")
	if code := r.exit(t); code != 0 {
		t.Fatalf("exit %d, want 0; output:\n%s", code, r.out.String())
	}
	if !r.has("local.pid") {
		t.Error("the local e2e did not run")
	}
	if b, _ := os.ReadFile(filepath.Join(r.marks, "build.args")); strings.TrimSpace(string(b)) != "--no-print-directory verify-generate lint build" {
		t.Errorf("the checks and build ran as make %q", b)
	}
	if !r.has("kind.after-build") {
		t.Error("the kind suite did not see the build done")
	}
	for _, want := range []string{"[kind suite] [kind] stage up: 1 s", "---- kind suite log: .local/kind-suite.log ----"} {
		if !strings.Contains(r.out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, r.out.String())
		}
	}
}

// TestAFailingBuildStopsTheKindSuite: the kind suite starts before the generate check, lint and
// build (the stand-in build ends only once it runs); their failure stops it, unit never starts, and
// the script exits with the build's code.
func TestAFailingBuildStopsTheKindSuite(t *testing.T) {
	r := start(t, "FAKE_BUILD=fail", "FAKE_KIND=done")
	if code := r.exit(t); code != 2 {
		t.Fatalf("exit %d, want 2; output:\n%s", code, r.out.String())
	}
	if !r.has("kind.stopped") {
		t.Errorf("the kind suite was not stopped; output:\n%s", r.out.String())
	}
	if r.has("kind.after-build") {
		t.Error("the kind suite went on to its tests after a failed build")
	}
	if r.has("unit.pid") {
		t.Error("unit ran after a failed build")
	}
}
