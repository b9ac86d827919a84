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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
const (
	testbedEnv   = "KAGENTI_TESTBED_ROLE"
	trustDomain  = "cluster.local"
	clusterIP    = "10.77.0.1"
	callerIP     = "10.77.0.2"
	proxyUID     = 1337
	callerID     = "spiffe://cluster.local/ns/agents/sa/caller"
	calleeID     = "spiffe://cluster.local/ns/agents/sa/callee"
	calleeHost   = "callee.agents.svc"
	passthroughH = "passthrough.example"
)

func TestMain(m *testing.M) {
	switch os.Getenv(testbedEnv) {
	case "hold": // keeps the caller's namespace alive until its stdin closes
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
	self   string // kagenti-authbridge, built for this test
	holder *exec.Cmd
	issuer string
	ports  map[string]int
	callee string // the callee's inbound address, host:port
	echo   string
	seen   chan http.Header // what the callee's agent received
	echoed chan http.Header // what the plain echo server received
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
	names := []string{"spire", "idp", "callee-in", "callee-agent", "echo", "outbound", "helper-health", "callee-status", "caller-status", "register-status"}
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

	t.Run("a pass-through route leaves the token alone", func(t *testing.T) {
		status, body := tb.agentCall(passthroughH, tb.echo, user)
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, "Bearer "+user, (<-tb.echoed).Get("Authorization"))
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

// network makes this namespace the cluster (10.77.0.1) and a second one the caller's pod
// (10.77.0.2), joined by two macvlan devices on a bridge.
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
	tb.holder = exec.Command(os.Args[0], "-test.run=^$")
	tb.holder.Env = append(os.Environ(), testbedEnv+"=hold")
	tb.holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	stdin, err := tb.holder.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, tb.holder.Start())
	t.Cleanup(func() { stdin.Close(); _ = tb.holder.Wait() })
	pid := strconv.Itoa(tb.holder.Process.Pid)
	run(t, "ip", "link", "set", "kpod", "netns", pid)
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", callerIP + "/24", "dev", "kpod"}, {"link", "set", "kpod", "up"}} {
		run(t, "nsenter", append([]string{"-t", pid, "-n", "ip"}, args...)...)
	}
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
	tb.startEnv("callee-inbound", env, tb.self, "inbound", "--config-dir", cfgDir, "--shared-dir", shared,
		"--status-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(tb.ports["callee-status"])), "--poll-interval", "500ms")
	tb.startEnv("callee-register", env, tb.self, "register", "--config-dir", cfgDir, "--shared-dir", shared,
		"--idp-credentials-dir", filepath.Join(tb.dir, "callee", "idp-credentials"),
		"--status-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(tb.ports["register-status"])))
	tb.callee = net.JoinHostPort(clusterIP, strconv.Itoa(tb.ports["callee-in"]))
	tb.waitReady("callee-status")
}

// callerSide runs the caller's pod in the caller namespace: init (rules and helper.conf),
// spiffe-helper and the outbound proxy, the last two as the proxy UID, as the injector will.
func (tb *testbed) callerSide() {
	t := tb.t
	cfgDir := filepath.Join(tb.dir, "caller", "config")
	shared := filepath.Join(tb.dir, "caller", "shared")
	require.NoError(t, os.MkdirAll(cfgDir, 0o755))
	require.NoError(t, os.MkdirAll(shared, 0o770))
	require.NoError(t, os.Chown(shared, proxyUID, proxyUID))
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
	tb.startEnv("caller-outbound", env, append([]string{"nsenter"}, inNS(proxyUID, tb.self, "outbound", "--config-dir", cfgDir, "--shared-dir", shared,
		"--status-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(tb.ports["caller-status"])), "--poll-interval", "500ms")...)...)
	tb.eventually("caller outbound ready", func() error {
		out, err := exec.Command("nsenter", inNS(0, "curl", "-sf", fmt.Sprintf("http://127.0.0.1:%d/readyz", tb.ports["caller-status"]))...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

func (tb *testbed) writeCallerConfig(audience string) {
	tb.writeConfig("caller", fmt.Sprintf(`outbound:
  tokenExchange:
    destinationRules:
    - match: {host: "%s:%d"}
      target: {audience: "%s", scopes: ["agent:invoke"]}
    - match: {host: "%s"}
`, calleeHost, tb.ports["callee-in"], audience, passthroughH))
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
	if statusPort == "caller-status" { // lives in the caller's namespace
		body, err = exec.Command("nsenter", "-t", strconv.Itoa(tb.holder.Process.Pid), "-n", "curl", "-sf", addr).Output()
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
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {"agent:invoke"}}
	req, _ := http.NewRequest(http.MethodPost, tb.issuer+"/oauth/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("user", "user-secret")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(tb.t, err)
	defer resp.Body.Close()
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	require.NoError(tb.t, json.NewDecoder(resp.Body).Decode(&tr))
	require.NotEmpty(tb.t, tr.AccessToken)
	assert.Equal(tb.t, []any{callerID}, payload(tb.t, tr.AccessToken)["aud"])
	return tr.AccessToken
}

// agentCall makes the caller's agent (UID 0 in the caller's namespace: redirected) send a GET to
// addr with Host host and the bearer token.
func (tb *testbed) agentCall(host, addr, token string) (int, string) {
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(tb.holder.Process.Pid), "-n", "--", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), testbedEnv+"=agent", "AGENT_URL=http://"+addr+"/tasks", "AGENT_HOST="+host, "AGENT_TOKEN="+token)
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
