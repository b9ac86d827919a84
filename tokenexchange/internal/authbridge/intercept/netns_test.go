package intercept

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/outbound"
)

// The namespace test runs this test binary three times over: the test itself; a child in a new
// network namespace that installs the rules and serves (role "pod"); and clients started by the
// child under another UID or in a third namespace (role "client").
const roleEnv = "KAGENTI_NETNS_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "pod":
		os.Exit(runPod())
	case "client":
		os.Exit(runClient())
	}
	os.Exit(m.Run())
}

// podReport is what the pod role found.
type podReport struct {
	Installed  map[string]int    `json:"installed"`
	Answers    map[string]string `json:"answers"`
	Rules      string            `json:"rules"`
	Error      string            `json:"error,omitempty"`
	Idempotent bool              `json:"idempotent"`
}

// TestInterceptionInANetworkNamespace installs the rules for real in a fresh network namespace
// and sends traffic through them: from a workload UID (redirected), from the proxy UID (not),
// to an excluded port and to loopback (not), and from another namespace inbound (redirected,
// except excluded ports). The proxies read the original destination with SO_ORIGINAL_DST.
func TestInterceptionInANetworkNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and install nftables rules")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip) to configure the test namespace's interfaces")
	}
	// The clients run as other users, who cannot enter go test's private build directory: they
	// get a copy of this binary they may execute.
	dir, err := os.MkdirTemp("", "kagenti-netns-") // t.TempDir's parent is private
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	bin, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	exe := filepath.Join(dir, "intercept.test")
	require.NoError(t, os.WriteFile(exe, bin, 0o755))

	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=pod")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	require.NoError(t, err, "pod role: %s", out)
	var rep podReport
	require.NoError(t, json.Unmarshal(out, &rep), string(out))
	require.Empty(t, rep.Error)
	t.Logf("installed rules:\n%s", rep.Rules)

	assert.Equal(t, map[string]int{"output": 6, "prerouting": 3}, rep.Installed, "rules read back from the kernel")
	assert.True(t, rep.Idempotent, "installing twice leaves the rules of one install")
	assert.Equal(t, map[string]string{
		"uid 1000 → 10.99.0.1:80":   "proxy orig=10.99.0.1:80",     // redirected; the proxy sees the original destination
		"uid 1337 → 10.99.0.1:80":   "direct 80",                   // the proxy's own traffic is not
		"uid 1000 → 10.99.0.1:5432": "direct 5432",                 // excluded port
		"uid 1000 → 127.0.0.1:9999": "loopback",                    // loopback is not
		"peer → 10.98.0.1:8081":     "inbound orig=10.98.0.1:8081", // inbound: to the auth proxy, original port kept
		"peer → 10.98.0.1:15125":    "admin",                       // excluded inbound port (the sidecars' status port)
	}, rep.Answers)
}

func runPod() int {
	rep := podReport{Answers: map[string]string{}}
	if err := pod(&rep); err != nil {
		rep.Error = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(rep)
	return 0
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// serve answers each connection on addr with reply(conn).
func serve(addr string, reply func(net.Conn) string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, reply(c)+"\n")
			c.Close()
		}
	}()
	return ln, nil
}

func withOrigDst(prefix string) func(net.Conn) string {
	return func(c net.Conn) string {
		dst, err := outbound.OriginalDestination(c)
		if err != nil {
			return prefix + " error=" + err.Error()
		}
		return prefix + " orig=" + dst.String()
	}
}

func pod(rep *podReport) error {
	for _, args := range [][]string{
		// Two macvlan devices on one bridge (this kernel has no veth): kin stays here, kout goes
		// to the peer namespace; they reach each other like a pod and a node.
		{"link", "set", "lo", "up"},
		{"link", "add", "kbr", "type", "bridge"},
		{"link", "set", "kbr", "up"},
		{"link", "add", "kin", "link", "kbr", "type", "macvlan", "mode", "bridge"},
		{"link", "add", "kout", "link", "kbr", "type", "macvlan", "mode", "bridge"},
		{"addr", "add", "10.98.0.1/24", "dev", "kin"},
		{"addr", "add", "10.99.0.1/24", "dev", "kin"},
		{"link", "set", "kin", "up"},
	} {
		if err := ip(args...); err != nil {
			return err
		}
	}
	fixed := func(s string) func(net.Conn) string { return func(net.Conn) string { return s } }
	for addr, reply := range map[string]func(net.Conn) string{
		"127.0.0.1:15123": withOrigDst("proxy"),
		"10.99.0.1:80":    fixed("direct 80"),
		"10.99.0.1:5432":  fixed("direct 5432"),
		"127.0.0.1:9999":  fixed("loopback"),
		":8080":           withOrigDst("inbound"),
		"10.98.0.1:8081":  fixed("agent reached directly"),
		":15125":          fixed("admin"),
	} {
		ln, err := serve(addr, reply)
		if err != nil {
			return err
		}
		defer ln.Close()
	}

	r := Rules{Outbound: true, ProxyPort: 15123, ProxyUID: 1337, OutboundExclude: []uint16{5432},
		Inbound: true, InboundPort: 8080, InboundExclude: []uint16{8080, 15125}}
	rep.Rules = r.Describe()
	if err := Install(r); err != nil {
		return err
	}
	first, err := Installed()
	if err != nil {
		return err
	}
	if err := Install(r); err != nil {
		return err
	}
	if rep.Installed, err = Installed(); err != nil {
		return err
	}
	rep.Idempotent = fmt.Sprint(first) == fmt.Sprint(rep.Installed)

	for _, tc := range []struct {
		uid  uint32
		addr string
	}{{1000, "10.99.0.1:80"}, {1337, "10.99.0.1:80"}, {1000, "10.99.0.1:5432"}, {1000, "127.0.0.1:9999"}} {
		answers, err := client(&syscall.SysProcAttr{Credential: &syscall.Credential{Uid: tc.uid, Gid: tc.uid}}, nil, tc.addr)
		if err != nil {
			return err
		}
		rep.Answers[fmt.Sprintf("uid %d → %s", tc.uid, tc.addr)] = answers[0]
	}

	// Inbound: a client in a third namespace, connected through the bridge.
	answers, err := client(&syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}, func(pid int) error {
		p := strconv.Itoa(pid)
		if err := ip("link", "set", "kout", "netns", p); err != nil {
			return err
		}
		for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", "10.98.0.2/24", "dev", "kout"}, {"link", "set", "kout", "up"}} {
			out, err := exec.Command("nsenter", append([]string{"-t", p, "-n", "ip"}, args...)...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("nsenter ip %v: %v: %s", args, err, out)
			}
		}
		return nil
	}, "10.98.0.1:8081", "10.98.0.1:15125")
	if err != nil {
		return err
	}
	rep.Answers["peer → 10.98.0.1:8081"] = answers[0]
	rep.Answers["peer → 10.98.0.1:15125"] = answers[1]
	return nil
}

// client runs the client role with attr, calls setup with its PID before it dials, and returns
// the first line each address answered.
func client(attr *syscall.SysProcAttr, setup func(pid int) error, addrs ...string) ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=client", "KAGENTI_DIAL="+strings.Join(addrs, ","))
	cmd.SysProcAttr = attr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if setup != nil {
		if err := setup(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, err
		}
	}
	_, _ = io.WriteString(stdin, "go\n")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("client %v: %v: %s", addrs, err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(addrs) {
		return nil, fmt.Errorf("client %v answered %q", addrs, out.String())
	}
	return lines, nil
}

func runClient() int {
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // wait until the namespace is wired
	for _, addr := range strings.Split(os.Getenv("KAGENTI_DIAL"), ",") {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			fmt.Println("dial error: " + err.Error())
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil {
			fmt.Println("read error: " + err.Error())
			continue
		}
		fmt.Println(strings.TrimSpace(line))
	}
	return 0
}
