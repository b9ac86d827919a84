// Package podrunner is a small test kubelet for the local kwok cluster, whose nodes run nothing:
// it starts a pod's containers as processes on this machine, as the pod spec says — init
// containers in order (native sidecars keep running), the images' programs from bin/ with the
// spec's args, env, user, capabilities and volumes — each container in a mount namespace of its
// own, the pod in a network namespace holding the IP kwok assigned. It needs root. Whatever in
// the spec it cannot honour fails the test, naming the container and field.
package podrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// parentEnv tells the launcher the runner's PID, to notice a runner that died before the
// parent-death signal was set again.
const parentEnv = "KAGENTI_PODRUNNER_PARENT"

// Kubelet runs pods of one test.
type Kubelet struct {
	Client client.Client
	Bridge *Bridge
	// Dir holds a directory per pod (volumes, container logs).
	Dir string
	// Programs maps an image name (the last path element without tag: "kagenti-authbridge") to the
	// program that is the image's entrypoint.
	Programs map[string]string
	// AgentArgv and AgentEnv start the test's stand-in for a container whose image has no program
	// (the agent); the container's own env comes first.
	AgentArgv, AgentEnv []string
	// SpireAgentSocketDir is what a csi.spiffe.io volume mounts: the SPIRE agent's socket directory.
	SpireAgentSocketDir string
	// SyncPeriod is how often ConfigMap, Secret and downward-API volumes are synced from the API
	// (the kubelet: its sync period, a minute, plus its cache's TTL). Default 1 s.
	SyncPeriod time.Duration

	mu          sync.Mutex
	mountPoints []string // created on the host, removed at the end
}

// NewKubelet returns a Kubelet whose host mount points are removed when the test ends.
func NewKubelet(t testing.TB, k *Kubelet) *Kubelet {
	if k.SyncPeriod == 0 {
		k.SyncPeriod = time.Second
	}
	t.Cleanup(k.removeMountPoints)
	return k
}

// mountPoint creates dir on the host if it is missing, remembering what it created.
func (k *Kubelet) mountPoint(dir string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := len(created) - 1; i >= 0; i-- { // parents first: removed last
		k.mountPoints = append(k.mountPoints, created[i])
	}
	return nil
}

func (k *Kubelet) removeMountPoints() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := len(k.mountPoints) - 1; i >= 0; i-- {
		_ = os.Remove(k.mountPoints[i]) // only when empty: never a directory someone else filled
	}
	k.mountPoints = nil
}

// RunningPod is a pod whose containers run as processes.
type RunningPod struct {
	Pod     *corev1.Pod
	Network *PodNetwork

	mu         sync.Mutex
	containers map[string]*process
	ready      map[string]bool // by container: its latest readiness (superviseProbes)
}

func (p *RunningPod) setReady(container string, ready bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready == nil {
		p.ready = map[string]bool{}
	}
	p.ready[container] = ready
}

// Ready reports whether every long-running container is ready, as the kubelet's Ready condition:
// started, past its startup probe, and its latest readiness probe passed; the names of those that
// are not.
func (p *RunningPod) Ready() (bool, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var not []string
	for name := range p.containers {
		if !p.ready[name] {
			not = append(not, name)
		}
	}
	return len(not) == 0, not
}

// WaitReady waits until Ready, polling every poll, and fails the test after timeout naming the
// containers that are not ready.
func (p *RunningPod) WaitReady(t testing.TB, timeout, poll time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ready, not := p.Ready()
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: containers %v not ready after %s", p.Pod.Name, not, timeout)
		}
		time.Sleep(poll)
	}
}

type process struct {
	cmd     *exec.Cmd
	log     string
	done    chan struct{}
	waitErr error
}

// PID is the process ID of a running container; it fails the test when the container exited.
func (p *RunningPod) PID(t testing.TB, container string) int {
	t.Helper()
	p.mu.Lock()
	proc, ok := p.containers[container]
	p.mu.Unlock()
	if !ok {
		t.Fatalf("pod %s has no running container %s", p.Pod.Name, container)
	}
	select {
	case <-proc.done:
		t.Fatalf("container %s of pod %s exited: %v; log %s", container, p.Pod.Name, proc.waitErr, proc.log)
	default:
	}
	return proc.cmd.Process.Pid
}

// Containers are the names of the running containers.
func (p *RunningPod) Containers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := make([]string, 0, len(p.containers))
	for n := range p.containers {
		names = append(names, n)
	}
	return names
}

// podRun is the state of one pod while it is being started.
type podRun struct {
	k       *Kubelet
	pod     *corev1.Pod
	dir     string
	net     *PodNetwork
	volumes map[string]*volume
	running *RunningPod
}

// Run starts pod (Running, with the IP kwok assigned) and returns once its init containers have
// completed and every other container was started. Everything is stopped when the test ends.
func (k *Kubelet) Run(t testing.TB, pod *corev1.Pod) *RunningPod {
	t.Helper()
	if err := checkPod(pod); err != nil {
		t.Fatal(err)
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		t.Fatalf("pod %s has no pod IP yet (%q)", pod.Name, pod.Status.PodIP)
	}
	r := &podRun{k: k, pod: pod, dir: filepath.Join(k.Dir, pod.Namespace+"_"+pod.Name), volumes: map[string]*volume{},
		running: &RunningPod{Pod: pod, containers: map[string]*process{}}}
	r.net = k.Bridge.NewPodNetwork(t, ip)
	r.running.Network = r.net
	ctx := context.Background()
	if err := r.materializeVolumes(ctx); err != nil {
		t.Fatal(err)
	}
	r.keepVolumesInSync(t)
	t.Logf("pod %s/%s at %s: resources are not enforced (no cgroups), DNS is the host's", pod.Namespace, pod.Name, ip)

	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		if sidecar {
			r.superviseProbes(t, c, r.start(t, ctx, c, true))
		} else {
			r.runToCompletion(t, ctx, c)
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		r.superviseProbes(t, c, r.start(t, ctx, c, true))
	}
	return r.running
}

func (r *podRun) materializeVolumes(ctx context.Context) error {
	for _, v := range r.pod.Spec.Volumes {
		vol, err := r.volumeSource(v)
		if err != nil {
			return fmt.Errorf("pod %s: %w", r.pod.Name, err)
		}
		if v.CSI == nil {
			mode := os.FileMode(0o755)
			if v.EmptyDir != nil {
				mode = 0o777 // the kubelet's emptyDir: writable by every container's user
			}
			if err := ensureDir(vol.dir, mode); err != nil {
				return err
			}
		}
		if err := vol.sync(ctx); err != nil {
			return fmt.Errorf("pod %s: volume %s: %w", r.pod.Name, v.Name, err)
		}
		r.volumes[v.Name] = vol
	}
	return nil
}

// keepVolumesInSync re-projects the API-backed volumes every SyncPeriod until the test ends.
// A failed sync is logged and retried, as the kubelet does.
func (r *podRun) keepVolumesInSync(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var mu sync.Mutex
	var failures []string
	go func() {
		defer close(done)
		tick := time.NewTicker(r.k.SyncPeriod)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, v := range r.volumes {
				if err := v.sync(ctx); err != nil && ctx.Err() == nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: %v", v.name, err))
					mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if len(failures) > 0 {
			t.Logf("pod %s: volume syncs that failed (retried): %q", r.pod.Name, failures)
		}
	})
}

// start launches a long-running container.
func (r *podRun) start(t testing.TB, ctx context.Context, c *corev1.Container, mayBeAgent bool) *process {
	t.Helper()
	spec, err := r.launchSpecFor(ctx, c, mayBeAgent)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(r.dir, c.Name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	encoded, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{childEnv + "=" + execChild, launchEnv + "=" + string(encoded), parentEnv + "=" + strconv.Itoa(os.Getpid())}
	cmd.Stdout, cmd.Stderr = logf, logf
	// A mount namespace and a UTS namespace (the pod's hostname) of its own; the launcher joins the
	// pod's network namespace itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("container %s: %v", c.Name, err)
	}
	p := &process{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.waitErr = cmd.Wait(); logf.Close(); close(p.done) }()
	r.running.mu.Lock()
	r.running.containers[c.Name] = p
	r.running.mu.Unlock()
	t.Cleanup(func() { r.stop(t, c.Name, p) })
	return p
}

// stop sends SIGTERM, then SIGKILL after the pod's termination grace period, and shows the log
// of a failed test.
func (r *podRun) stop(t testing.TB, name string, p *process) {
	grace := 30 * time.Second // the API's default
	if g := r.pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	if t.Failed() {
		b, _ := os.ReadFile(p.log)
		t.Logf("--- pod %s container %s log:\n%s", r.pod.Name, name, b)
	}
}

// runToCompletion runs an init container and fails the test unless it exits 0.
func (r *podRun) runToCompletion(t testing.TB, ctx context.Context, c *corev1.Container) {
	t.Helper()
	p := r.start(t, ctx, c, false)
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("init container %s of pod %s did not complete in 2 minutes; log %s", c.Name, r.pod.Name, p.log)
	}
	b, _ := os.ReadFile(p.log)
	if p.waitErr != nil {
		t.Fatalf("init container %s of pod %s failed: %v\n%s", c.Name, r.pod.Name, p.waitErr, b)
	}
	t.Logf("init container %s of pod %s completed:\n%s", c.Name, r.pod.Name, b)
	r.running.mu.Lock()
	delete(r.running.containers, c.Name)
	r.running.mu.Unlock()
}
