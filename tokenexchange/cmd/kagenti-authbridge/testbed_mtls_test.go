package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mtls runs two more callee inbound proxies in front of the callee's agent, one strict and one
// permissive, with the callee's X.509 SVID from the SPIRE agent, and calls them from the caller
// (mTLS off, then restarted strict) and from the pod (no SVID).
func (tb *testbed) mtls(t *testing.T, user string) {
	serverSock := filepath.Join(tb.dir, "spire-server", "api.sock")
	run(t, filepath.Join(tb.bin, "spire-server"), "entry", "create", "-socketPath", serverSock,
		"-parentID", "spiffe://cluster.local/testbed-node", "-spiffeID", calleeID, "-selector", "unix:uid:0")

	inbound := func(name, mode string, rules string) string {
		cfgDir := filepath.Join(tb.dir, name, "config")
		require.NoError(t, os.MkdirAll(cfgDir, 0o755))
		write(t, filepath.Join(cfgDir, "config.yaml"), "mtls: {mode: "+mode+"}\n"+rules)
		env := append(tb.env("callee"), "KAGENTI_INBOUND_PORT="+strconv.Itoa(tb.ports[name+"-in"]))
		tb.startEnv(name+"-inbound", env, tb.self, "inbound", "--config-dir", cfgDir, "--shared-dir", filepath.Join(tb.dir, "callee", "shared"),
			"--status-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(tb.ports[name+"-status"])))
		tb.waitReady(name + "-status")
		return net.JoinHostPort(clusterIP, strconv.Itoa(tb.ports[name+"-in"]))
	}
	strict := inbound("strict", "strict", fmt.Sprintf(`inbound:
  authorization:
    rules:
    - {name: only-the-caller-over-mtls, effect: Allow, when: 'peer == "%s"'}
`, callerID))
	permissive := inbound("permissive", "permissive", "")
	route := func(addr string) string {
		return fmt.Sprintf("    - match: {host: %q}\n      target: {audience: %q, scopes: [\"agent:invoke\"]}\n", addr, calleeID)
	}
	tb.writeCallerConfig(calleeID, route(strict), route(permissive))
	tb.waitForContent("caller-status", "caller", "config.yaml")

	t.Run("mixed: a caller with mTLS off calls a permissive callee in plain HTTP", func(t *testing.T) {
		status, body := tb.agentCall(calleeHost, permissive, user)
		require.Equal(t, http.StatusOK, status, body)
		<-tb.seen
	})
	t.Run("a plaintext request to a strict callee is refused with the reason", func(t *testing.T) {
		resp, err := http.Get("http://" + strict + "/tasks")
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusUpgradeRequired, resp.StatusCode)
		assert.Contains(t, string(b), `"error":"mtls_required"`)
		status, body := tb.agentCall(calleeHost, strict, user)
		assert.Equal(t, http.StatusUpgradeRequired, status, "the caller without mTLS: %s", body)
		assert.Contains(t, body, "mtls_required")
	})
	t.Run("a caller without an SVID is refused by a strict callee", func(t *testing.T) {
		// The pod has no SPIFFE: its outbound speaks plain HTTP (no token: nothing to exchange).
		status, body := tb.agentCallFrom(tb.pod, calleeHost, strict, "")
		assert.Equal(t, http.StatusUpgradeRequired, status, body)
		assert.Contains(t, body, "mtls_required")
	})

	// The caller restarted with mtls strict (a startup setting), as a pod restart would.
	cfgDir, shared := filepath.Join(tb.dir, "caller", "config"), filepath.Join(tb.dir, "caller", "shared")
	tb.writeCallerConfig(calleeID, route(strict), route(permissive), "mtls: {mode: strict}\n")
	require.NoError(t, tb.callerOutbound.Process.Signal(syscall.SIGTERM))
	_, _ = tb.callerOutbound.Process.Wait()
	pid := strconv.Itoa(tb.holder.Process.Pid)
	env := tb.env("caller", "KAGENTI_CLIENT_REGISTRATION_ENABLED=false")
	tb.callerOutbound = tb.startEnv("caller-outbound-mtls", env, "nsenter", "-t", pid, "-n", "--",
		"setpriv", fmt.Sprintf("--reuid=%d", proxyUID), fmt.Sprintf("--regid=%d", proxyUID), "--clear-groups",
		tb.self, "outbound", "--config-dir", cfgDir, "--shared-dir", shared,
		"--status-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(tb.ports["caller-status"])), "--poll-interval", "500ms")
	tb.eventually("caller outbound (mTLS strict) ready", func() error {
		out, err := tb.podCurl(pid, fmt.Sprintf("http://127.0.0.1:%d/readyz", tb.ports["caller-status"]))
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})

	t.Run("strict caller to strict callee: over mTLS, the peer's SPIFFE ID seen and authorised", func(t *testing.T) {
		status, body := tb.agentCall(calleeHost, strict, user)
		require.Equal(t, http.StatusOK, status, "the rule admits only peer %s: %s", callerID, body)
		h := <-tb.seen
		assert.NotEmpty(t, h.Get("X-Kagenti-Claims"), "the exchanged token reached the agent")
		log := readFile(t, filepath.Join(tb.dir, "caller-outbound-mtls.log"))
		assert.Contains(t, log, "mutual TLS to kagenti sidecars")
	})
	t.Run("a valid mTLS peer without a token is refused", func(t *testing.T) {
		status, body := tb.agentCall(calleeHost, strict, "")
		assert.Equal(t, http.StatusUnauthorized, status, body)
	})
	t.Run("strict caller to permissive callee: mTLS", func(t *testing.T) {
		status, body := tb.agentCall(calleeHost, permissive, user)
		require.Equal(t, http.StatusOK, status, body)
		<-tb.seen
	})
	t.Run("strict caller to a destination without mTLS: nothing sent, 503 mtls_unavailable", func(t *testing.T) {
		status, body := tb.agentCall(passthroughH, tb.echo, "")
		assert.Equal(t, http.StatusServiceUnavailable, status, body)
		assert.Contains(t, body, "mtls_unavailable")
	})
}

// podCurl runs curl in the network namespace of pid.
func (tb *testbed) podCurl(pid, u string) ([]byte, error) {
	return exec.Command("nsenter", "-t", pid, "-n", "--", "curl", "-sf", u).CombinedOutput()
}
