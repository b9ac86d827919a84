package extauthz

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startOPA runs kagenti-opa-extauthz (hack/opa-extauthz) with testdata/policy.rego on a loopback
// port and returns its address. The binary is $KAGENTI_OPA_EXTAUTHZ, else bin/ of the repository
// (hack/tools.sh builds it there).
func startOPA(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("KAGENTI_OPA_EXTAUTHZ")
	if bin == "" {
		bin, _ = filepath.Abs("../../../../../bin/kagenti-opa-extauthz")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no kagenti-opa-extauthz at %s (build it: hack/tools.sh, or set KAGENTI_OPA_EXTAUTHZ)", bin)
	}
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--policy", "testdata/policy.rego")
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

func TestARegoPolicyForOPAsEnvoyPluginDecidesThroughTheClient(t *testing.T) {
	c := newClient(t, Config{Address: startOPA(t)})

	allowed := request()
	d, err := c.Authorize(context.Background(), allowed)
	require.NoError(t, err)
	assert.True(t, d.Allowed, d.Reason)

	noScope := request()
	noScope.Scopes = []string{"openid"}
	d, err = c.Authorize(context.Background(), noScope)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Contains(t, d.Reason, "no rule allows this request")

	otherCaller := request()
	otherCaller.Caller = "spiffe://example.org/ns/team/sa/other"
	d, err = c.Authorize(context.Background(), otherCaller)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
}

func BenchmarkCheckAgainstOPAOnLoopback(b *testing.B) {
	c, err := New(Config{Address: startOPA(b)})
	require.NoError(b, err)
	defer c.Close()
	r := request()
	for b.Loop() {
		if d, err := c.Authorize(context.Background(), r); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}
