package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// The identity test bed runs the real programs: SPIRE server and agent, spiffe-helper and
// kagenti-dev-idp from bin/ (make tools), and kagenti-authbridge built from this package. It runs
// in a network namespace of its own (nothing touches the host's network) that plays the cluster;
// the caller's "pod" is a second namespace inside it, joined to the first by macvlan devices on a
// bridge, where proxy-init's nftables rules redirect the agent's traffic to the outbound proxy.
//
//	cluster namespace 10.77.0.1: SPIRE server + agent, dev IdP, callee (inbound → echo agent), plain echo server
//	caller namespace  10.77.0.2: init (rules + helper.conf), spiffe-helper, outbound (UID 1337), the agent (UID 0)
//	pod namespace     10.77.0.3: init (rules), one `sidecar register inbound outbound` process (UID 1337), the agent
//	proxied namespace 10.77.0.4: proxy mode: no init, no rules; `sidecar register outbound` (UID 1337), the agent with HTTP_PROXY
//
// The callee's and the caller's roles run as separate processes (the containers injectors before the
// combined sidecar rendered); the third pod runs the three long-running roles in one process, as
// the injector's authbridge container does.
const (
	testbedEnv   = "KAGENTI_TESTBED_ROLE"
	trustDomain  = "cluster.local"
	clusterIP    = "10.77.0.1"
	callerIP     = "10.77.0.2"
	podIP        = "10.77.0.3"
	proxiedIP    = "10.77.0.4"
	proxyUID     = 1337
	callerID     = "spiffe://cluster.local/ns/agents/sa/caller"
	calleeID     = "spiffe://cluster.local/ns/agents/sa/callee"
	calleeHost   = "callee.agents.svc"
	passthroughH = "passthrough.example"
)

func TestMain(m *testing.M) {
	switch os.Getenv(testbedEnv) {
	case "hold": // keeps a pod's namespace alive until its stdin closes
		if addr := os.Getenv("HOLD_AGENT_ADDR"); addr != "" {
			if err := serveAgent(addr); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case "agent":
		os.Exit(agentCall())
	}
	os.Exit(m.Run())
}

// repoBin is the repository's bin/ directory.
func repoBin(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "bin"))
	require.NoError(t, err)
	return dir
}

func TestIdentityTestBed(t *testing.T) {
	if os.Getenv(testbedEnv) != "cluster" {
		if os.Geteuid() != 0 {
			t.Skip("the test bed needs root: network namespaces, nftables, processes under other UIDs")
		}
		bin := repoBin(t)
		for _, b := range []string{"spire-server", "spire-agent", "spiffe-helper", "kagenti-dev-idp"} {
			if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
				t.Skipf("%s missing in %s: build the identity test bed with make tools (hack/tools.sh identity; make unit does)", b, bin)
			}
		}
		// Run this test again inside a fresh network namespace.
		cmd := exec.Command(os.Args[0], "-test.run=^TestIdentityTestBed$", "-test.v")
		cmd.Env = append(os.Environ(), testbedEnv+"=cluster", "KAGENTI_TESTBED_BIN="+bin)
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
		out, err := cmd.CombinedOutput()
		t.Logf("test bed output:\n%s", out)
		require.NoError(t, err, "the test bed failed (output above)")
		return
	}
	tb := newTestbed(t)
	tb.run()
}

type testbed struct {
	t      *testing.T
	bin    string
	dir    string
	self   string    // kagenti-authbridge, built for this test
	holder *exec.Cmd // the caller's namespace
	pod    *exec.Cmd // the namespace of the pod with the combined sidecar
	// proxied is the namespace of the pod injected in proxy mode (no redirect).
	proxied *exec.Cmd
	// podSidecar is its `kagenti-authbridge sidecar register inbound outbound` process.
	podSidecar *exec.Cmd
	// The separate role processes (for the RSS comparison).
	calleeRegister, calleeInbound, callerOutbound *exec.Cmd
	issuer                                        string
	ports                                         map[string]int
	callee                                        string // the callee's inbound address, host:port
	echo                                          string
	seen                                          chan http.Header // what the callee's agent received
	echoed                                        chan http.Header // what the plain echo server received
}

func newTestbed(t *testing.T) *testbed {
	dir, err := os.MkdirTemp("/tmp", "ktb-") // short: unix socket paths are limited to 108 bytes
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	tb := &testbed{t: t, bin: os.Getenv("KAGENTI_TESTBED_BIN"), dir: dir, ports: map[string]int{},
		seen: make(chan http.Header, 16), echoed: make(chan http.Header, 16)}
	tb.self = filepath.Join(dir, "kagenti-authbridge")
	build := exec.Command("go", "build", "-o", tb.self, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building kagenti-authbridge: %s", out)
	names := []string{"spire", "idp", "callee-in", "callee-agent", "echo", "outbound", "helper-health", "callee-status", "caller-status", "register-status",
		"pod-sidecar-status", "pod-register-status", "pod-inbound-status", "pod-outbound-status",
		"proxied-sidecar-status", "proxied-register-status", "proxied-outbound-status",
		"strict-in", "strict-status", "permissive-in", "permissive-status"}
	for i, port := range listenerPorts(t, len(names)) {
		tb.ports[names[i]] = port
	}
	return tb
}

// listenerPorts returns n ports for the test bed's listeners, below the network namespace's
// ephemeral port range. A port picked by binding port 0 comes from that range, and between the
// pick and the listener's bind, an outgoing connection of another process of the test bed
// (spire-agent to spire-server, a role to the IdP) may take it as its local port: that failed the
// register role's status server once with "address already in use". The test bed has its network
// namespaces to itself, so nothing else listens below the range.
func listenerPorts(t *testing.T, n int) []int {
	t.Helper()
	const base = 20000
	ephemeral := 32768 // the kernel's default lower bound
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if low, err := strconv.Atoi(f[0]); err == nil {
				ephemeral = low
			}
		}
	}
	require.Less(t, base+n, ephemeral, "no room for the test bed's listeners below the ephemeral port range")
	ports := make([]int, n)
	for i := range ports {
		ports[i] = base + i
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i])))
		require.NoError(t, err, "port %d, below the ephemeral range, is taken in the test bed's network namespace", ports[i])
		require.NoError(t, ln.Close())
	}
	return ports
}

func (tb *testbed) run() {
	t := tb.t
	tb.network()
	tb.spire()
	tb.idp()
	tb.calleeSide()
	tb.callerSide()
	tb.podSide()
	tb.proxiedSide()

	user := tb.userToken()

	t.Run("SPIRE issued the caller a JWT SVID through spiffe-helper", func(t *testing.T) {
		svid := filepath.Join(tb.dir, "caller", "shared", "jwt_svid.token")
		info, err := os.Stat(svid)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o640), info.Mode().Perm())
		claims := payload(t, strings.TrimSpace(readFile(t, svid)))
		assert.Equal(t, callerID, claims["sub"])
		assert.Equal(t, []any{tb.issuer}, claims["aud"])
	})

	t.Run("the outbound proxy exchanges the token for the callee, whose inbound accepts it", func(t *testing.T) {
		status, body := tb.agentCall(calleeHost, tb.callee, user)
		require.Equal(t, http.StatusOK, status, body)
		got := <-tb.seen
		exchanged := strings.TrimPrefix(got.Get("Authorization"), "Bearer ")
		require.NotEqual(t, user, exchanged)
		c := payload(t, exchanged)
		assert.Equal(t, []any{calleeID}, c["aud"])
		assert.Equal(t, "agent:invoke", c["scope"])
		assert.Equal(t, map[string]any{"sub": callerID}, c["act"], "the caller, authenticated by its JWT SVID, acts for the user")
		assert.Equal(t, strings.Split(exchanged, ".")[1], got.Get("X-Kagenti-Claims"))
	})

	t.Run("the callee refuses the original token: wrong audience", func(t *testing.T) {
		status, body := httpGet(t, "http://"+tb.callee+"/tasks", calleeHost, user)
		assert.Equal(t, http.StatusUnauthorized, status)
		assert.Contains(t, body, `does not include \"`+calleeID+`\"`)
	})

	t.Run("one sidecar process: register writes credentials, inbound validates, outbound exchanges", func(t *testing.T) {
		code, body, err := tb.podGet("pod-sidecar-status", "/readyz")
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "register: ready\ninbound: ready\noutbound: ready", body)
		code, body, err = tb.podGet("pod-sidecar-status", "/healthz")
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, code, body)
		for _, port := range []string{"pod-register-status", "pod-inbound-status", "pod-outbound-status"} {
			st, err := tb.status(port)
			require.NoError(t, err, port)
			assert.True(t, st.Ready, "%s: %+v", port, st)
			assert.Equal(t, contentHash(t, filepath.Join(tb.dir, "pod", "config", "config.yaml")), st.ContentHash, port)
		}

		shared := filepath.Join(tb.dir, "pod", "shared")
		id, secret := readFile(t, filepath.Join(shared, "client-id.txt")), readFile(t, filepath.Join(shared, "client-secret.txt"))
		require.NotEmpty(t, id, "register wrote no client ID")
		require.NotEmpty(t, secret, "register wrote no client secret")

		inbound := "http://" + net.JoinHostPort(podIP, strconv.Itoa(tb.ports["callee-in"])) + "/tasks"
		status, body := httpGet(t, inbound, "caller.agents.svc", user)
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, "agent: claims "+strings.Split(user, ".")[1], body, "inbound admitted the user's token and passed its claims")
		status, body = httpGet(t, inbound, "caller.agents.svc", tb.clientToken(id, secret))
		assert.Equal(t, http.StatusUnauthorized, status, "a token for another audience: %s", body)

		// The agent's token is for the registered client (the IdP exchanges only a token whose
		// audience includes the client that asks); outbound exchanges it with the client's
		// credentials for one the callee accepts.
		// It carries the scope the route asks for: the IdP issues no scope the subject token lacks.
		status, body = tb.agentCallFrom(tb.pod, calleeHost, tb.callee, tb.credentialsToken(id, secret, url.Values{"grant_type": {"client_credentials"}, "scope": {"agent:invoke"}}))
		require.Equal(t, http.StatusOK, status, body)
		c := payload(t, strings.TrimPrefix((<-tb.seen).Get("Authorization"), "Bearer "))
		assert.Equal(t, []any{calleeID}, c["aud"])
		assert.Equal(t, map[string]any{"sub": id}, c["act"], "the registered client acts")

		time.Sleep(2 * time.Second) // idle after registration and the first requests
		t.Logf("RSS idle after registration (load average %s): one sidecar process (register, inbound, outbound) %.1f MiB; "+
			"separate processes: callee register %.1f MiB + callee inbound %.1f MiB + caller outbound %.1f MiB = %.1f MiB",
			loadavg(), mib(tb.podSidecar), mib(tb.calleeRegister), mib(tb.calleeInbound), mib(tb.callerOutbound),
			mib(tb.calleeRegister)+mib(tb.calleeInbound)+mib(tb.callerOutbound))
	})

	t.Run("proxy mode: no redirect in the pod, HTTP_PROXY on the agent, the callee gets the exchanged token", func(t *testing.T) {
		assert.Empty(t, tb.nftTables(tb.proxied), "proxy mode installs no nftables table")
		assert.NotEmpty(t, tb.nftTables(tb.holder), "while the transparent caller's namespace has proxy-init's")

		shared := filepath.Join(tb.dir, "proxied", "shared")
		id, secret := readFile(t, filepath.Join(shared, "client-id.txt")), readFile(t, filepath.Join(shared, "client-secret.txt"))
		require.NotEmpty(t, id, "register wrote no client ID")
		// The route asks for agent:invoke, and scopes only narrow along the chain.
		token := tb.credentialsToken(id, secret, url.Values{"grant_type": {"client_credentials"}, "scope": {"agent:invoke"}})
		proxy := "http://127.0.0.1:" + strconv.Itoa(tb.ports["outbound"])
		// The request line names the callee as the client was asked to (Go's client writes
		// req.Host there when proxying); the test bed has no DNS, so by its address.
		status, body := tb.agentCallWith(tb.proxied, []string{"HTTP_PROXY=" + proxy, "http_proxy=" + proxy}, tb.callee, tb.callee, token)
		require.Equal(t, http.StatusOK, status, body)
		c := payload(t, strings.TrimPrefix((<-tb.seen).Get("Authorization"), "Bearer "))
		assert.Equal(t, []any{calleeID}, c["aud"], "exchanged for the callee, as in transparent mode")
		assert.Equal(t, map[string]any{"sub": id}, c["act"], "the registered client acts")

		// What proxy mode cannot catch: a client that ignores HTTP_PROXY reaches the callee with
		// its own token, which the callee refuses.
		status, body = tb.agentCallWith(tb.proxied, nil, tb.callee, tb.callee, token)
		assert.Equal(t, http.StatusUnauthorized, status, "not exchanged without the proxy: %s", body)
	})

	t.Run("a two-hop chain: user → caller → pod → callee, each hop added by the IdP", func(t *testing.T) {
		// The caller's hop, as its outbound proxy makes it (its JWT SVID from SPIRE as client
		// assertion and actor token), for the pod's registered client; then the pod's agent calls
		// the callee with that token through the pod's real outbound proxy.
		podID := readFile(t, filepath.Join(tb.dir, "pod", "shared", "client-id.txt"))
		require.NotEmpty(t, podID)
		hop := func(scope string) (int, map[string]any) { return tb.callerHop(user, podID, scope) }
		code, out := hop("agent:invoke")
		require.Equal(t, http.StatusOK, code, "%v", out)
		toPod := out["access_token"].(string)
		assert.Equal(t, map[string]any{"sub": callerID}, payload(t, toPod)["act"])

		status, body := tb.agentCallFrom(tb.pod, calleeHost, tb.callee, toPod)
		require.Equal(t, http.StatusOK, status, body)
		c := payload(t, strings.TrimPrefix((<-tb.seen).Get("Authorization"), "Bearer "))
		assert.Equal(t, "user", c["sub"], "the callee sees the user as subject")
		assert.Equal(t, map[string]any{"sub": podID, "act": map[string]any{"sub": callerID}}, c["act"],
			"the pod acts, for the caller, for the user")

		// Scope escalation: a token without agent:invoke is not exchanged for one with it.
		code, out = hop("")
		require.Equal(t, http.StatusOK, code, "%v", out)
		status, body = tb.agentCallFrom(tb.pod, calleeHost, tb.callee, out["access_token"].(string))
		assert.Equal(t, http.StatusForbidden, status)
		assert.Contains(t, body, "scope_not_delegated")
		code, out = hop("agent:invoke admin")
		assert.Equal(t, http.StatusBadRequest, code)
		assert.Equal(t, "invalid_scope", out["error"], "the IdP refuses a scope the user's token lacks")
	})

	t.Run("the callee's policy admits the chain only through the pod; a direct call by the caller is denied by its rule", func(t *testing.T) {
		podID := readFile(t, filepath.Join(tb.dir, "pod", "shared", "client-id.txt"))
		require.NotEmpty(t, podID)
		tb.writeConfig("callee", fmt.Sprintf(`inbound:
  authorization:
    rules:
    - name: only-through-the-pod
      effect: Allow
      when: 'chain.size() == 2 && chain[0] == "%s" && chain[1] == "%s"'
    - name: no-direct-call-by-the-caller
      effect: Deny
      when: 'caller == "%s"'
`, podID, callerID, callerID))
		tb.waitForContent("callee-status", "callee", "config.yaml")
		defer func() {
			tb.writeConfig("callee", "inbound: {}\n")
			tb.waitForContent("callee-status", "callee", "config.yaml")
		}()

		// user → caller → pod → callee: every hop exchanged, the callee's rule allows the chain.
		code, out := tb.callerHop(user, podID, "agent:invoke")
		require.Equal(t, http.StatusOK, code, "%v", out)
		status, body := tb.agentCallFrom(tb.pod, calleeHost, tb.callee, out["access_token"].(string))
		require.Equal(t, http.StatusOK, status, body)
		c := payload(t, strings.TrimPrefix((<-tb.seen).Get("Authorization"), "Bearer "))
		assert.Equal(t, map[string]any{"sub": podID, "act": map[string]any{"sub": callerID}}, c["act"])

		// user → caller → callee: exchanged by the caller's outbound proxy, refused by the rule.
		status, body = tb.agentCall(calleeHost, tb.callee, user)
		assert.Equal(t, http.StatusForbidden, status, body)
		assert.Contains(t, body, "no-direct-call-by-the-caller", "the denial names the rule")
	})

	t.Run("a pass-through route leaves the token alone", func(t *testing.T) {
		status, body := tb.agentCall(passthroughH, tb.echo, user)
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, "Bearer "+user, (<-tb.echoed).Get("Authorization"))
	})

	t.Run("egress default Deny: the allowed callee is reached, another destination gets 403 egress_denied", func(t *testing.T) {
		// The callee's inbound port on the cluster address, nothing else; the exchange still
		// works: the sidecar's own calls to the IdP (on the same address) are not redirected.
		tb.writeCallerConfig(calleeID, fmt.Sprintf("  egress:\n    default: Deny\n    allow: [{cidr: %s/32, ports: [%d]}]\n",
			clusterIP, tb.ports["callee-in"]))
		tb.waitForContent("caller-status", "caller", "config.yaml")
		t.Cleanup(func() {
			tb.writeCallerConfig(calleeID)
			tb.waitForContent("caller-status", "caller", "config.yaml")
		})
		status, body := tb.agentCall(calleeHost, tb.callee, user)
		require.Equal(t, http.StatusOK, status, body)
		<-tb.seen
		status, body = tb.agentCall(passthroughH, tb.echo, user)
		assert.Equal(t, http.StatusForbidden, status, body)
		assert.Contains(t, body, `"error":"egress_denied"`)
		select {
		case h := <-tb.echoed:
			t.Errorf("the denied destination was reached: %v", h)
		default:
		}
	})

	t.Run("a route's audience changed in config.yaml takes effect without a restart", func(t *testing.T) {
		tb.writeCallerConfig(calleeID + "-v2")
		tb.waitForContent("caller-status", "caller", "config.yaml")
		status, body := tb.agentCall(calleeHost, tb.callee, user)
		assert.Equal(t, http.StatusUnauthorized, status, "the callee still expects its own audience")
		assert.Contains(t, body, calleeID+"-v2")

		tb.writeConfig("callee", "inbound: {validation: {audience: '"+calleeID+"-v2'}}\n")
		tb.waitForContent("callee-status", "callee", "config.yaml")
		status, body = tb.agentCall(calleeHost, tb.callee, user)
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, []any{calleeID + "-v2"}, payload(t, strings.TrimPrefix((<-tb.seen).Get("Authorization"), "Bearer "))["aud"])
	})

	t.Run("a malformed config.yaml is reported and the last good one keeps serving", func(t *testing.T) {
		good := contentHash(t, filepath.Join(tb.dir, "callee", "config", "config.yaml"))
		tb.writeConfig("callee", "inbound: [not, a, mapping\n")
		tb.eventually("the callee reports the rejected file", func() error {
			st, err := tb.status("callee-status")
			if err != nil {
				return err
			}
			if st.ConfigError == "" || st.Ready {
				return fmt.Errorf("not reported yet: %+v", st)
			}
			return nil
		})
		st, err := tb.status("callee-status")
		require.NoError(t, err)
		assert.Equal(t, good, st.ContentHash, "still running the last good content")
		assert.Contains(t, st.ConfigError, "config.yaml")
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", tb.ports["callee-status"]))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Contains(t, string(b), "the latest configuration was rejected")

		status, body := tb.agentCall(calleeHost, tb.callee, user)
		require.Equal(t, http.StatusOK, status, "the callee still validates with the last good audience: %s", body)
		<-tb.seen

		tb.writeConfig("callee", "inbound: {validation: {audience: '"+calleeID+"-v2'}}\n")
		tb.waitReady("callee-status")
	})

	t.Run("mutual TLS between sidecars with X.509 SVIDs from SPIRE", func(t *testing.T) { tb.mtls(t, user) })

	t.Run("register: RFC 7591 registration at the IdP yields working client credentials", func(t *testing.T) {
		shared := filepath.Join(tb.dir, "callee", "shared")
		deadline := time.Now().Add(30 * time.Second)
		var id, secret string
		for time.Now().Before(deadline) {
			id, secret = readFile(t, filepath.Join(shared, "client-id.txt")), readFile(t, filepath.Join(shared, "client-secret.txt"))
			if id != "" && secret != "" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		require.NotEmpty(t, id, "client-registration wrote no credentials")
		form := url.Values{"grant_type": {"client_credentials"}}
		req, _ := http.NewRequest(http.MethodPost, tb.issuer+"/oauth/token", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		assert.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	})

}

// network makes this namespace the cluster (10.77.0.1), a second one the caller's pod (10.77.0.2)
// and a third the pod with the combined sidecar (10.77.0.3), joined by macvlan devices on a bridge.
func (tb *testbed) network() {
	t := tb.t
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "kbr", "type", "bridge"},
		{"link", "set", "kbr", "up"},
		{"link", "add", "kcl", "link", "kbr", "type", "macvlan", "mode", "bridge"},
		{"link", "add", "kpod", "link", "kbr", "type", "macvlan", "mode", "bridge"},
		{"addr", "add", clusterIP + "/24", "dev", "kcl"},
		{"link", "set", "kcl", "up"},
	} {
		run(t, "ip", args...)
	}
	tb.holder = tb.podNamespace("kpod", callerIP, "")
	run(t, "ip", "link", "add", "kpod3", "link", "kbr", "type", "macvlan", "mode", "bridge")
	tb.pod = tb.podNamespace("kpod3", podIP, net.JoinHostPort("127.0.0.1", strconv.Itoa(tb.ports["callee-agent"])))
	run(t, "ip", "link", "add", "kpod4", "link", "kbr", "type", "macvlan", "mode", "bridge")
	tb.proxied = tb.podNamespace("kpod4", proxiedIP, "")
}

// podNamespace starts a process in a network namespace of its own (a pod), moves the macvlan
// device dev into it with address ip, and returns the process. With agentAddr, the process also
// serves the pod's agent there.
func (tb *testbed) podNamespace(dev, ip, agentAddr string) *exec.Cmd {
	t := tb.t
	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), testbedEnv+"=hold", "HOLD_AGENT_ADDR="+agentAddr)
	holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	holder.Stderr = os.Stderr
	stdin, err := holder.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, holder.Start())
	t.Cleanup(func() { stdin.Close(); _ = holder.Wait() })
	pid := strconv.Itoa(holder.Process.Pid)
	run(t, "ip", "link", "set", dev, "netns", pid)
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", ip + "/24", "dev", dev}, {"link", "set", dev, "up"}} {
		run(t, "nsenter", append([]string{"-t", pid, "-n", "ip"}, args...)...)
	}
	return holder
}

// serveAgent serves a pod's agent on addr (from the holder process, inside the pod's namespace):
// it answers every request with the claims the inbound proxy passed in X-Kagenti-Claims.
func serveAgent(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "agent: claims %s", r.Header.Get("X-Kagenti-Claims"))
	})}
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// spire starts a SPIRE server and an agent attested with a join token, and registers the caller
// workload (unix attestor: the UID the caller's sidecars run as).
func (tb *testbed) spire() {
	t := tb.t
	sdir, adir := filepath.Join(tb.dir, "spire-server"), filepath.Join(tb.dir, "spire-agent")
	require.NoError(t, os.MkdirAll(sdir, 0o755))
	require.NoError(t, os.MkdirAll(adir, 0o755))
	serverSock := filepath.Join(sdir, "api.sock")
	write(t, filepath.Join(sdir, "server.conf"), fmt.Sprintf(`server {
  bind_address = "127.0.0.1"
  bind_port = "%d"
  socket_path = %q
  trust_domain = %q
  data_dir = %q
  log_level = "WARN"
  default_jwt_svid_ttl = "5m"
}
plugins {
  DataStore "sql" {
    plugin_data {
      database_type = "sqlite3"
      connection_string = %q
    }
  }
  KeyManager "memory" {
    plugin_data {}
  }
  NodeAttestor "join_token" {
    plugin_data {}
  }
}
`, tb.ports["spire"], serverSock, trustDomain, filepath.Join(sdir, "data"), filepath.Join(sdir, "datastore.sqlite3")))
	tb.start("spire-server", filepath.Join(tb.bin, "spire-server"), "run", "-config", filepath.Join(sdir, "server.conf"))
	tb.eventually("SPIRE server healthy", func() error {
		return exec.Command(filepath.Join(tb.bin, "spire-server"), "healthcheck", "-socketPath", serverSock).Run()
	})
	out := run(t, filepath.Join(tb.bin, "spire-server"), "token", "generate", "-socketPath", serverSock, "-spiffeID", "spiffe://cluster.local/testbed-node")
	token := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "Token:"))
	run(t, filepath.Join(tb.bin, "spire-server"), "entry", "create", "-socketPath", serverSock,
		"-parentID", "spiffe://cluster.local/testbed-node", "-spiffeID", callerID, "-selector", fmt.Sprintf("unix:uid:%d", proxyUID))
	bundle := run(t, filepath.Join(tb.bin, "spire-server"), "bundle", "show", "-socketPath", serverSock, "-format", "spiffe")
	write(t, filepath.Join(tb.dir, "bundle.json"), bundle)

	write(t, filepath.Join(adir, "agent.conf"), fmt.Sprintf(`agent {
  data_dir = %q
  log_level = "WARN"
  server_address = "127.0.0.1"
  server_port = "%d"
  socket_path = %q
  trust_domain = %q
  insecure_bootstrap = true
}
plugins {
  NodeAttestor "join_token" {
    plugin_data {}
  }
  KeyManager "memory" {
    plugin_data {}
  }
  WorkloadAttestor "unix" {
    plugin_data {}
  }
}
`, filepath.Join(adir, "data"), tb.ports["spire"], filepath.Join(adir, "agent.sock"), trustDomain))
	tb.start("spire-agent", filepath.Join(tb.bin, "spire-agent"), "run", "-config", filepath.Join(adir, "agent.conf"), "-joinToken", token)
	tb.eventually("SPIRE agent healthy", func() error {
		return exec.Command(filepath.Join(tb.bin, "spire-agent"), "healthcheck", "-socketPath", filepath.Join(adir, "agent.sock")).Run()
	})
}

// idp starts kagenti-dev-idp on the cluster address with a "user" client whose tokens are for the
// caller, and the SPIRE bundle to accept JWT SVIDs.
func (tb *testbed) idp() {
	addr := net.JoinHostPort(clusterIP, strconv.Itoa(tb.ports["idp"]))
	tb.issuer = "http://" + addr
	tb.start("kagenti-dev-idp", filepath.Join(tb.bin, "kagenti-dev-idp"), "--addr", addr,
		"--client", "user:user-secret:"+callerID,
		"--spiffe-bundle", filepath.Join(tb.dir, "bundle.json"), "--spiffe-trust-domain", trustDomain)
	tb.eventually("dev IdP serving", func() error {
		resp, err := http.Get(tb.issuer + "/.well-known/openid-configuration")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
}

// env is the environment the injector gives a workload's identity containers.
func (tb *testbed) env(workload string, extra ...string) []string {
	return append([]string{
		"POD_NAMESPACE=agents", "KAGENTI_WORKLOAD=" + workload, "KAGENTI_SERVICE_ACCOUNT=" + workload, "POD_NAME=" + workload + "-0",
		"KAGENTI_TRUST_DOMAIN=" + trustDomain, "KAGENTI_SPIFFE_ENABLED=true", "KAGENTI_SPIFFE_SOCKET=" + filepath.Join(tb.dir, "spire-agent", "agent.sock"),
		"KAGENTI_JWT_AUDIENCE=" + tb.issuer, // the SVID is the client assertion at the IdP: its audience is the issuer
		"KAGENTI_IDP_PROVIDER=oidc", "KAGENTI_OIDC_ISSUER=" + tb.issuer, "KAGENTI_OIDC_TOKEN_URL=" + tb.issuer + "/oauth/token",
		"KAGENTI_OIDC_JWKS_URL=" + tb.issuer + "/keys", "KAGENTI_OIDC_REGISTRATION_URL=" + tb.issuer + "/register",
		"KAGENTI_CLIENT_NAME_TEMPLATE={{.Namespace}}/{{.WorkloadName}}", "KAGENTI_TOKEN_EXCHANGE=true",
		"KAGENTI_INBOUND_PORT=" + strconv.Itoa(tb.ports["callee-in"]), "KAGENTI_TARGET_PORT=" + strconv.Itoa(tb.ports["callee-agent"]),
		"KAGENTI_OUTBOUND_PORT=" + strconv.Itoa(tb.ports["outbound"]), "KAGENTI_PROXY_UID=" + strconv.Itoa(proxyUID),
		"KAGENTI_DEFAULT_AUDIENCE=downstream", "PATH=" + os.Getenv("PATH"),
	}, extra...)
}

// calleeSide starts the callee: its agent (an echo server on loopback), the inbound proxy in front
// of it, and client-registration against the IdP; and the plain echo server of the pass-through
// route.
func (tb *testbed) calleeSide() {
	t := tb.t
	record := func(ch chan http.Header) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			ch <- r.Header.Clone()
			fmt.Fprintf(w, "ok %s", r.URL.Path)
		}
	}
	tb.serve(net.JoinHostPort("127.0.0.1", strconv.Itoa(tb.ports["callee-agent"])), record(tb.seen))
	tb.echo = net.JoinHostPort(clusterIP, strconv.Itoa(tb.ports["echo"]))
	tb.serve(tb.echo, record(tb.echoed))

	cfgDir := filepath.Join(tb.dir, "callee", "config")
	shared := filepath.Join(tb.dir, "callee", "shared")
	require.NoError(t, os.MkdirAll(cfgDir, 0o755))
	require.NoError(t, os.MkdirAll(shared, 0o755))
	env := tb.env("callee")
	tb.calleeInbound = tb.startEnv("callee-inbound", env, tb.self, "inbound", "--config-dir", cfgDir, "--shared-dir", shared,
		"--status-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(tb.ports["callee-status"])), "--poll-interval", "500ms")
	tb.calleeRegister = tb.startEnv("callee-register", env, tb.self, "register", "--config-dir", cfgDir, "--shared-dir", shared,
		"--idp-credentials-dir", filepath.Join(tb.dir, "callee", "idp-credentials"),
		"--status-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(tb.ports["register-status"])))
	tb.callee = net.JoinHostPort(clusterIP, strconv.Itoa(tb.ports["callee-in"]))
	tb.waitReady("callee-status")
}

// proxyPodDirs makes a pod's configuration directory and its shared volume, owned by the proxy
// UID (the identity sidecars that write to it run as that user), and returns both.
func (tb *testbed) proxyPodDirs(pod string) (cfgDir, shared string) {
	cfgDir, shared = filepath.Join(tb.dir, pod, "config"), filepath.Join(tb.dir, pod, "shared")
	require.NoError(tb.t, os.MkdirAll(cfgDir, 0o755))
	require.NoError(tb.t, os.MkdirAll(shared, 0o770))
	require.NoError(tb.t, os.Chown(shared, proxyUID, proxyUID))
	return cfgDir, shared
}

// callerSide runs the caller's pod in the caller namespace: init (rules and helper.conf),
// spiffe-helper and the outbound proxy, the last two as the proxy UID, as the injector will.
func (tb *testbed) callerSide() {
	t := tb.t
	cfgDir, shared := tb.proxyPodDirs("caller")
	tb.writeCallerConfig(calleeID)
	env := tb.env("caller", "KAGENTI_CLIENT_REGISTRATION_ENABLED=false") // authenticate with the JWT SVID
	pid := strconv.Itoa(tb.holder.Process.Pid)
	inNS := func(uid int, args ...string) []string {
		ns := []string{"-t", pid, "-n", "--"}
		if uid != 0 {
			ns = append(ns, "setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups")
		}
		return append(ns, args...)
	}
	helperConf := filepath.Join(shared, "helper.conf")
	out := runEnv(t, env, "nsenter", inNS(0, tb.self, "init", "--config-dir", cfgDir, "--shared-dir", shared, "--helper-conf", helperConf,
		"--spiffe-helper-health-port", strconv.Itoa(tb.ports["helper-health"]),
		"--always-exclude-inbound", strconv.Itoa(tb.ports["caller-status"]))...)
	t.Logf("init:\n%s", out)
	require.Contains(t, out, "redirect to :"+strconv.Itoa(tb.ports["outbound"]))

	tb.startEnv("spiffe-helper", env, append([]string{"nsenter"}, inNS(proxyUID, filepath.Join(tb.bin, "spiffe-helper"), "-config", helperConf)...)...)
	tb.eventually("JWT SVID written", func() error {
		_, err := os.Stat(filepath.Join(shared, "jwt_svid.token"))
		return err
	})
	tb.callerOutbound = tb.startEnv("caller-outbound", env, append([]string{"nsenter"}, inNS(proxyUID, tb.self, "outbound", "--config-dir", cfgDir, "--shared-dir", shared,
		"--status-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(tb.ports["caller-status"])), "--poll-interval", "500ms")...)...)
	tb.eventually("caller outbound ready", func() error {
		out, err := exec.Command("nsenter", inNS(0, "curl", "-sf", fmt.Sprintf("http://127.0.0.1:%d/readyz", tb.ports["caller-status"]))...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

// podSide runs the third pod: init (the rules) and one kagenti-authbridge process with the three
// long-running roles, as the proxy UID. The pod's workload is named caller (its SPIFFE ID, the
// audience its inbound expects, is the caller's), registers with the IdP (no SPIFFE) and calls the
// callee through its outbound with the registered client's credentials.
func (tb *testbed) podSide() {
	t := tb.t
	cfgDir, shared := tb.proxyPodDirs("pod")
	tb.writeConfig("pod", fmt.Sprintf(`outbound:
  tokenExchange:
    destinationRules:
    - match: {host: "%s:%d"}
      target: {audience: "%s", scopes: ["agent:invoke"]}
`, clusterIP, tb.ports["callee-in"], calleeID))
	env := tb.env("caller", "KAGENTI_SPIFFE_ENABLED=false")
	pid := strconv.Itoa(tb.pod.Process.Pid)
	statusPorts := []string{"pod-sidecar-status", "pod-register-status", "pod-inbound-status", "pod-outbound-status"}
	var exclude []string
	for _, p := range statusPorts {
		exclude = append(exclude, strconv.Itoa(tb.ports[p]))
	}
	out := runEnv(t, env, "nsenter", "-t", pid, "-n", "--", tb.self, "init", "--config-dir", cfgDir, "--shared-dir", shared,
		"--helper-conf", "", "--always-exclude-inbound", strings.Join(exclude, ","))
	t.Logf("pod init:\n%s", out)
	require.Contains(t, out, "redirect to :"+strconv.Itoa(tb.ports["outbound"]))

	addr := func(port string) string { return net.JoinHostPort("", strconv.Itoa(tb.ports[port])) }
	tb.podSidecar = tb.startEnv("pod-sidecar", env, "nsenter", "-t", pid, "-n", "--",
		"setpriv", fmt.Sprintf("--reuid=%d", proxyUID), fmt.Sprintf("--regid=%d", proxyUID), "--clear-groups",
		tb.self, "sidecar", "register", "inbound", "outbound", "--config-dir", cfgDir, "--shared-dir", shared, "--poll-interval", "500ms",
		"--idp-credentials-dir", filepath.Join(tb.dir, "pod", "idp-credentials"),
		"--status-address", addr("pod-sidecar-status"), "--register-status-address", addr("pod-register-status"),
		"--inbound-status-address", addr("pod-inbound-status"), "--outbound-status-address", addr("pod-outbound-status"))
	tb.eventually("the pod's sidecar ready", func() error {
		code, body, err := tb.podGet("pod-sidecar-status", "/readyz")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d: %s", code, body)
		}
		return err
	})
}

// proxiedSide runs the pod injected in proxy mode: no init and so no rules, one kagenti-authbridge
// process with register and outbound as the proxy UID. Its agent reaches the outbound proxy only
// because its HTTP_PROXY names it (agentCallWith).
func (tb *testbed) proxiedSide() {
	cfgDir, shared := tb.proxyPodDirs("proxied")
	tb.writeConfig("proxied", fmt.Sprintf(`outbound:
  tokenExchange:
    destinationRules:
    - match: {host: "%s:%d"}
      target: {audience: "%s", scopes: ["agent:invoke"]}
`, clusterIP, tb.ports["callee-in"], calleeID))
	env := tb.env("proxied", "KAGENTI_SPIFFE_ENABLED=false", "KAGENTI_INBOUND_ENABLED=false")
	pid := strconv.Itoa(tb.proxied.Process.Pid)
	addr := func(port string) string { return net.JoinHostPort("", strconv.Itoa(tb.ports[port])) }
	tb.startEnv("proxied-sidecar", env, "nsenter", "-t", pid, "-n", "--",
		"setpriv", fmt.Sprintf("--reuid=%d", proxyUID), fmt.Sprintf("--regid=%d", proxyUID), "--clear-groups",
		tb.self, "sidecar", "register", "outbound", "--config-dir", cfgDir, "--shared-dir", shared, "--poll-interval", "500ms",
		"--idp-credentials-dir", filepath.Join(tb.dir, "proxied", "idp-credentials"),
		"--status-address", addr("proxied-sidecar-status"), "--register-status-address", addr("proxied-register-status"),
		"--outbound-status-address", addr("proxied-outbound-status"))
	tb.eventually("the proxied pod's sidecar ready", func() error {
		out, err := exec.Command("nsenter", "-t", pid, "-n", "curl", "-sf", fmt.Sprintf("http://127.0.0.1:%d/readyz", tb.ports["proxied-sidecar-status"])).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

// nftTables lists the nftables tables of the network namespace holder holds, read from the kernel.
func (tb *testbed) nftTables(holder *exec.Cmd) []string {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid))
	require.NoError(tb.t, err)
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	require.NoError(tb.t, err)
	tables, err := c.ListTables()
	require.NoError(tb.t, err)
	var names []string
	for _, t := range tables {
		names = append(names, t.Name)
	}
	return names
}

// podGet sends a GET to a status port of the pod, from inside its namespace.
func (tb *testbed) podGet(statusPort, path string) (int, string, error) {
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(tb.pod.Process.Pid), "-n", "curl", "-s", "-w", "\n%{http_code}",
		fmt.Sprintf("http://127.0.0.1:%d%s", tb.ports[statusPort], path)).Output()
	if err != nil {
		return 0, "", err
	}
	// curl prints the body, then a line with the status code.
	i := strings.LastIndex(string(out), "\n")
	if i < 0 {
		return 0, "", fmt.Errorf("no status code in %q", out)
	}
	status, err := strconv.Atoi(strings.TrimSpace(string(out)[i+1:]))
	return status, strings.TrimSpace(string(out)[:i]), err
}

// clientToken gets a token with client credentials; its audience is the client's ID.
func (tb *testbed) clientToken(id, secret string) string {
	return tb.credentialsToken(id, secret, url.Values{"grant_type": {"client_credentials"}})
}

// credentialsToken asks the IdP's token endpoint for a token with form, as client id.
func (tb *testbed) credentialsToken(id, secret string, form url.Values) string {
	req, _ := http.NewRequest(http.MethodPost, tb.issuer+"/oauth/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(tb.t, err)
	defer resp.Body.Close()
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	require.NoError(tb.t, json.NewDecoder(resp.Body).Decode(&tr))
	require.NotEmpty(tb.t, tr.AccessToken, "client credentials of %s", id)
	return tr.AccessToken
}

// writeCallerConfig names the destinations by address: the outbound proxy takes a route by a Host
// name only when that name resolves to the connection's destination, and the test bed's names
// (calleeHost, passthroughH, sent as Host headers) resolve to nothing on this machine.
func (tb *testbed) writeCallerConfig(audience string, extra ...string) {
	tb.writeConfig("caller", fmt.Sprintf(`outbound:
  tokenExchange:
    delegation: chained
    destinationRules:
    - match: {host: "%s:%d"}
      target: {audience: "%s", scopes: ["agent:invoke"]}
    - match: {host: "%s:%d"}
`, clusterIP, tb.ports["callee-in"], audience, clusterIP, tb.ports["echo"])+strings.Join(extra, ""))
}

// callerHop is the caller's exchange of the user's token for audience, as its outbound proxy makes
// it: its JWT SVID from SPIRE as client assertion and as actor token.
func (tb *testbed) callerHop(user, audience, scope string) (int, map[string]any) {
	t := tb.t
	svid := strings.TrimSpace(readFile(t, filepath.Join(tb.dir, "caller", "shared", "jwt_svid.token")))
	form := url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token": {user}, "subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"audience": {audience}, "client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
		"client_assertion": {svid}, "actor_token": {svid}, "actor_token_type": {"urn:ietf:params:oauth:token-type:jwt"}}
	if scope != "" {
		form.Set("scope", scope)
	}
	resp, err := http.PostForm(tb.issuer+"/oauth/token", form)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// writeConfig replaces config.yaml the way the kubelet updates a ConfigMap volume.
func (tb *testbed) writeConfig(workload, content string) {
	dir := filepath.Join(tb.dir, workload, "config")
	ts := filepath.Join(dir, fmt.Sprintf("..%d", time.Now().UnixNano()))
	require.NoError(tb.t, os.MkdirAll(ts, 0o755))
	write(tb.t, filepath.Join(ts, "config.yaml"), content)
	link := filepath.Join(dir, "config.yaml")
	if _, err := os.Lstat(link); err != nil {
		require.NoError(tb.t, os.Symlink(filepath.Join("..data", "config.yaml"), link))
	}
	tmp := filepath.Join(dir, "..data_tmp")
	require.NoError(tb.t, os.Symlink(filepath.Base(ts), tmp))
	require.NoError(tb.t, os.Rename(tmp, filepath.Join(dir, "..data")))
}

// waitForContent waits until the role behind a status port runs the current config.yaml.
func (tb *testbed) waitForContent(statusPort, workload, file string) {
	want := contentHash(tb.t, filepath.Join(tb.dir, workload, "config", file))
	tb.eventually("the role runs the new config.yaml", func() error {
		st, err := tb.status(statusPort)
		if err != nil {
			return err
		}
		if st.ContentHash != want {
			return fmt.Errorf("running %s, want %s (%s)", st.ContentHash, want, st.ConfigError)
		}
		return nil
	})
}

type roleStatus struct {
	Ready       bool   `json:"ready"`
	ContentHash string `json:"contentHash"`
	ConfigError string `json:"configError"`
}

func (tb *testbed) status(statusPort string) (roleStatus, error) {
	var st roleStatus
	addr := fmt.Sprintf("http://127.0.0.1:%d/status", tb.ports[statusPort])
	var body []byte
	var err error
	if ns := tb.namespaceOf(statusPort); ns != nil {
		body, err = exec.Command("nsenter", "-t", strconv.Itoa(ns.Process.Pid), "-n", "curl", "-sf", addr).Output()
	} else {
		var resp *http.Response
		if resp, err = http.Get(addr); err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
	}
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(body, &st)
}

// namespaceOf is the holder of the pod namespace a status port lives in; nil for the cluster's.
func (tb *testbed) namespaceOf(statusPort string) *exec.Cmd {
	switch {
	case statusPort == "caller-status":
		return tb.holder
	case strings.HasPrefix(statusPort, "pod-"):
		return tb.pod
	}
	return nil
}

func (tb *testbed) waitReady(statusPort string) {
	tb.eventually(statusPort+" ready", func() error {
		st, err := tb.status(statusPort)
		if err != nil {
			return err
		}
		if !st.Ready {
			return fmt.Errorf("not ready: %+v", st)
		}
		return nil
	})
}

// userToken gets a token for the user, whose audience is the caller (as a token the caller's own
// inbound proxy would admit).
func (tb *testbed) userToken() string {
	tok := tb.credentialsToken("user", "user-secret", url.Values{"grant_type": {"client_credentials"}, "scope": {"agent:invoke"}})
	assert.Equal(tb.t, []any{callerID}, payload(tb.t, tok)["aud"])
	return tok
}

// agentCall makes the caller's agent (UID 0 in the caller's namespace: redirected) send a GET to
// addr with Host host and the bearer token.
func (tb *testbed) agentCall(host, addr, token string) (int, string) {
	return tb.agentCallFrom(tb.holder, host, addr, token)
}

// agentCallFrom is agentCall from the agent of the pod whose namespace holder holds.
func (tb *testbed) agentCallFrom(holder *exec.Cmd, host, addr, token string) (int, string) {
	return tb.agentCallWith(holder, nil, host, addr, token)
}

// agentCallWith is agentCallFrom with the agent's environment extended by env (HTTP_PROXY), and
// without any proxy variable of the test's own.
func (tb *testbed) agentCallWith(holder *exec.Cmd, env []string, host, addr, token string) (int, string) {
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(holder.Process.Pid), "-n", "--", os.Args[0], "-test.run=^$")
	base := slices.DeleteFunc(os.Environ(), func(e string) bool {
		name, _, _ := strings.Cut(e, "=")
		return strings.EqualFold(name, "HTTP_PROXY") || strings.EqualFold(name, "HTTPS_PROXY") || strings.EqualFold(name, "NO_PROXY")
	})
	cmd.Env = append(append(base, env...), testbedEnv+"=agent", "AGENT_URL=http://"+addr+"/tasks", "AGENT_HOST="+host, "AGENT_TOKEN="+token)
	out, err := cmd.Output()
	require.NoError(tb.t, err, "agent call: %s", out)
	status, body, _ := strings.Cut(string(out), "\n")
	code, err := strconv.Atoi(status)
	require.NoError(tb.t, err, string(out))
	return code, body
}

func agentCall() int {
	status, body := doGet(os.Getenv("AGENT_URL"), os.Getenv("AGENT_HOST"), os.Getenv("AGENT_TOKEN"))
	fmt.Printf("%d\n%s", status, body)
	return 0
}

func httpGet(t *testing.T, u, host, token string) (int, string) {
	t.Helper()
	return doGet(u, host, token)
}

func doGet(u, host, token string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return 0, err.Error()
	}
	req.Host = host
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Process and file helpers.

// mib is the resident set of a running process, in MiB.
func mib(cmd *exec.Cmd) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return float64(kib) / 1024
		}
	}
	return 0
}

func (tb *testbed) start(name string, args ...string) { tb.startEnv(name, os.Environ(), args...) }

func (tb *testbed) startEnv(name string, env []string, args ...string) *exec.Cmd {
	t := tb.t
	logf, err := os.Create(filepath.Join(tb.dir, name+".log"))
	require.NoError(t, err)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start(), name)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("--- %s log:\n%s", name, b)
		}
	})
	return cmd
}

func (tb *testbed) serve(addr string, h http.Handler) {
	ln, err := net.Listen("tcp", addr)
	require.NoError(tb.t, err)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	tb.t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
}

func (tb *testbed) eventually(what string, f func() error) {
	tb.t.Helper()
	deadline := time.Now().Add(90 * time.Second) // SPIRE's first start is slow on a loaded machine
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	tb.t.Fatalf("timed out waiting for %s: %v", what, err)
}

func run(t *testing.T, name string, args ...string) string {
	return runEnv(t, os.Environ(), name, args...)
}

func runEnv(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
	return string(out)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

func payload(t *testing.T, jwt string) map[string]any {
	t.Helper()
	parts := strings.Split(jwt, ".")
	require.Len(t, parts, 3, jwt)
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// contentHash is the hash a role reports for a ConfigMap volume holding only this config.yaml.
func contentHash(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return authconfig.ContentHash(map[string][]byte{authconfig.ConfigFile: b})
}
