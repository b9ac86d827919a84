package podrunner

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// linkPrefix names every link the runner creates on the host, so that leftovers of a killed run
// are found and removed (and nothing else is touched).
const linkPrefix = "kgpr"

// Bridge is the host side of the pods' network: a Linux bridge holding HostAddr, to which each pod
// namespace is joined by a veth pair. Host processes (the controllers, SPIRE, an identity
// provider) reach pod IPs through it, and pods reach HostAddr.
type Bridge struct {
	Name     string
	HostAddr netip.Prefix
}

// NewBridge creates the bridge with hostAddr (an address in the pods' subnet that the node's pod
// CIDR does not hand out), after removing links left over by an earlier run; it is deleted, with
// every pod link on it, when the test ends.
func NewBridge(t testing.TB, hostAddr netip.Prefix) *Bridge {
	t.Helper()
	removeLeftoverLinks(t)
	b := &Bridge{Name: linkPrefix + "br0", HostAddr: hostAddr}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", b.Name).Run() })
	ipCmd(t, "link", "add", b.Name, "type", "bridge")
	ipCmd(t, "addr", "add", hostAddr.String(), "dev", b.Name)
	ipCmd(t, "link", "set", b.Name, "up")
	return b
}

func removeLeftoverLinks(t testing.TB) {
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatalf("ip link show: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		// "12: kgprbr0: <…>" or "13: kgprh1a2b@if12: <…>"
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(fields[1], ":"), "@")
		if strings.HasPrefix(name, linkPrefix) {
			t.Logf("removing %s, left over by an earlier run", name)
			_ = exec.Command("ip", "link", "del", name).Run()
		}
	}
}

// PodNetwork is one pod's network namespace, kept alive by a holder process.
type PodNetwork struct {
	IP     netip.Addr
	holder *exec.Cmd
}

// NSPath is the namespace's path for setns.
func (n *PodNetwork) NSPath() string {
	return "/proc/" + strconv.Itoa(n.holder.Process.Pid) + "/ns/net"
}

// Exec runs a command inside the namespace (as root) and returns its combined output.
func (n *PodNetwork) Exec(args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"--net=" + n.NSPath(), "--"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// NewPodNetwork creates a network namespace with lo, and eth0 holding ip on the bridge's subnet
// with the bridge's address as default gateway. The namespace and its veth pair go away with the
// holder, at the end of the test.
func (b *Bridge) NewPodNetwork(t testing.TB, ip netip.Addr) *PodNetwork {
	t.Helper()
	if !b.HostAddr.Contains(ip) {
		t.Fatalf("pod IP %s is outside the bridge's subnet %s", ip, b.HostAddr.Masked())
	}
	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), childEnv+"="+holdChild)
	holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatalf("holder stdin: %v", err)
	}
	if err := holder.Start(); err != nil {
		t.Fatalf("starting the network namespace holder for %s: %v", ip, err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = holder.Wait() })
	n := &PodNetwork{IP: ip, holder: holder}

	host := fmt.Sprintf("%sh%d", linkPrefix, holder.Process.Pid)
	pod := fmt.Sprintf("%sp%d", linkPrefix, holder.Process.Pid)
	ipCmd(t, "link", "add", host, "type", "veth", "peer", "name", pod)
	ipCmd(t, "link", "set", host, "master", b.Name, "up")
	ipCmd(t, "link", "set", pod, "netns", strconv.Itoa(holder.Process.Pid))
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "set", pod, "name", "eth0"},
		{"addr", "add", netip.PrefixFrom(ip, b.HostAddr.Bits()).String(), "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", b.HostAddr.Addr().String()},
	} {
		if out, err := n.Exec(append([]string{"ip"}, args...)...); err != nil {
			t.Fatalf("pod %s: ip %s: %v: %s", ip, strings.Join(args, " "), err, out)
		}
	}
	return n
}

func ipCmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
