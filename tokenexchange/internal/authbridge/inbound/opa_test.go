package inbound

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startOPA runs kagenti-opa-extauthz (hack/opa-extauthz: a real OPA deciding with Rego through
// OPA's Go API) with policy on a loopback port and returns its address. The binary is
// $KAGENTI_OPA_EXTAUTHZ, else bin/kagenti-opa-extauthz of the repository (make tools builds it);
// the test is skipped when neither exists.
func startOPA(t testing.TB, policy string) string {
	t.Helper()
	bin := os.Getenv("KAGENTI_OPA_EXTAUTHZ")
	if bin == "" {
		bin, _ = filepath.Abs("../../../../bin/kagenti-opa-extauthz")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no kagenti-opa-extauthz at %s (make tools builds it; or set KAGENTI_OPA_EXTAUTHZ)", bin)
	}
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--policy", policy)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok {
			addr, _, _ := strings.Cut(rest, ",")
			go func() {
				for sc.Scan() {
				}
			}()
			return addr
		}
	}
	t.Fatalf("kagenti-opa-extauthz exited before listening: %v", sc.Err())
	return ""
}

// A real OPA, configured through config.yaml's inbound.authorization.external, allows and denies
// requests over HTTP on the caller's SPIFFE ID (source.principal) and the token's sub claim.
func TestARealOPADecidesThroughTheInboundProxy(t *testing.T) {
	addr := startOPA(t, "testdata/external.rego")
	f := newFixture(t)
	f.withPolicy("inbound: {authorization: {external: {address: \"" + addr + "\", timeout: 2s}}}\n")

	a := f.get("/tasks", f.viaMiddle(), nil)
	assert.Equal(t, http.StatusOK, a.status, a.text)
	assert.Equal(t, "agent: /tasks", a.text)

	a = f.get("/tasks", f.direct(), nil)
	assert.Equal(t, http.StatusForbidden, a.status, "caller is not middle")
	assert.Equal(t, map[string]string{"error": "access_denied", "rule": "external",
		"reason": "external authorizer " + addr + ": denied: only middle, for user-1 (only middle, for user-1)"}, a.body)

	other := f.token(f.valid(map[string]any{"sub": "user-2", "act": map[string]any{"sub": middle}}))
	a = f.get("/tasks", other, nil)
	assert.Equal(t, http.StatusForbidden, a.status, "sub is not user-1")
	assert.Equal(t, "external", a.body["rule"])

	a = f.get("/admin", f.viaMiddle(), nil)
	assert.Equal(t, http.StatusForbidden, a.status, "path is not /tasks")
}

// BenchmarkThroughInboundWithExternal is BenchmarkThroughInbound with an ext_authz server on
// loopback that allows (a Go server: the client and proxy's cost; opa: kagenti-opa-extauthz with
// a Rego policy), and without one in the same run: the external authorizer's cost is the
// difference of the p50s.
func BenchmarkThroughInboundWithExternal(b *testing.B) {
	b.Run("none", func(b *testing.B) {
		f := newFixture(b)
		measure(b, f.url+"/tasks", f.viaMiddle())
	})
	b.Run("go-server", func(b *testing.B) {
		ext := startExtServer(b, allowAll)
		f := newFixture(b)
		f.withPolicy("inbound: {authorization: {external: {address: \"" + ext.addr + "\"}}}\n")
		measure(b, f.url+"/tasks", f.viaMiddle())
	})
	b.Run("opa", func(b *testing.B) {
		addr := startOPA(b, "testdata/external.rego")
		f := newFixture(b)
		f.withPolicy("inbound: {authorization: {external: {address: \"" + addr + "\"}}}\n")
		measure(b, f.url+"/tasks", f.viaMiddle())
	})
}
