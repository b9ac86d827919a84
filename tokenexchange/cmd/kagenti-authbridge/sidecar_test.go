package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar/sidecartest"
)

func TestParseRoles(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    []string
		wantErr string
	}{
		{args: []string{"register", "inbound", "outbound"}, want: []string{"register", "inbound", "outbound"}},
		{args: []string{"outbound", "register"}, want: []string{"register", "outbound"}},
		{args: []string{"inbound"}, want: []string{"inbound"}},
		{args: nil, wantErr: "no role given: name one or more of register, inbound, outbound"},
		{args: []string{"register", "init"}, wantErr: `unknown role "init"`},
		{args: []string{"auth-proxy"}, wantErr: `unknown role "auth-proxy"`},
		{args: []string{"inbound", "outbound", "inbound"}, wantErr: `role "inbound" is named twice`},
	} {
		got, err := parseRoles(tc.args)
		if tc.wantErr != "" {
			assert.ErrorContains(t, err, tc.wantErr, "%v", tc.args)
			continue
		}
		require.NoError(t, err, "%v", tc.args)
		assert.Equal(t, tc.want, got)
	}
	assert.Equal(t, contract.SidecarRoles, []string{"register", "inbound", "outbound"}, "the roles the sidecar command knows")
}

func TestSidecarCommandRefusesBadRoles(t *testing.T) {
	for args, want := range map[string]string{
		"":                  "no role given",
		"register proxy":    `unknown role "proxy"`,
		"outbound outbound": `role "outbound" is named twice`,
	} {
		root := newRootCommand()
		argv := []string{contract.AuthbridgeSidecarCommand}
		if args != "" {
			argv = append(argv, strings.Fields(args)...)
		}
		root.SetArgs(argv)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.ExecuteContext(t.Context())
		assert.ErrorContains(t, err, want, "sidecar %s", args)
	}
}

func TestAggregateStatus(t *testing.T) {
	status := func(notReady ...string) func() sidecar.Status {
		return func() sidecar.Status { return sidecar.Status{Ready: len(notReady) == 0, NotReady: notReady} }
	}
	register, inbound, outbound := &roleState{name: "register"}, &roleState{name: "inbound"}, &roleState{name: "outbound"}
	srv := httptest.NewServer(aggregateHandler([]*roleState{register, inbound, outbound}, nil))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}

	register.run(status("not registered yet for the current configuration"), nil)
	inbound.setWaiting("register")
	outbound.setWaiting("register")
	code, body := get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "register: not ready: not registered yet for the current configuration\ninbound: waiting for register to be ready\noutbound: waiting for register to be ready\n", body)
	code, body = get("/healthz")
	assert.Equal(t, http.StatusOK, code, "waiting is live: %s", body)

	register.run(status(), nil)
	inbound.run(status(), nil)
	outbound.run(status("no client credentials yet"), nil)
	code, body = get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "register: ready\ninbound: ready\noutbound: not ready: no client credentials yet\n", body)

	outbound.run(status(), nil)
	code, body = get("/readyz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "register: ready\ninbound: ready\noutbound: ready\n", body)
	code, _ = get("/healthz")
	assert.Equal(t, http.StatusOK, code)

	var wedged atomic.Bool
	inbound.run(status(), func() []string {
		if wedged.Load() {
			return []string{"inbound proxy on :8080: wedged, not accepting connections for 30s"}
		}
		return nil
	})
	code, _ = get("/healthz")
	assert.Equal(t, http.StatusOK, code)
	wedged.Store(true)
	code, body = get("/healthz")
	assert.Equal(t, http.StatusServiceUnavailable, code, "a wedged accept loop fails liveness")
	assert.Contains(t, body, "inbound: not alive: inbound proxy on :8080: wedged, not accepting connections for 30s\n")
	code, _ = get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code, "and readiness")

	inbound.stop()
	code, body = get("/healthz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "inbound: stopped\n")
	code, _ = get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
}

// testConfig is a role configuration on the defaults alone.
func testConfig(t *testing.T) *sidecar.Config {
	return sidecartest.Config(t, t.TempDir(), "http://idp/register")
}

// fakeRole is a role whose readiness and failure the test controls.
type fakeRole struct {
	ready    atomic.Bool
	prepared atomic.Bool
	fail     chan error
}

func (f *fakeRole) prepare(name string) prepareRole {
	return func(*commonFlags, *sidecar.Config, *http.Client, *zap.Logger) (*role, error) {
		f.prepared.Store(true)
		return &role{name: name, statusAddr: "127.0.0.1:0",
			readiness: func() []string {
				if f.ready.Load() {
					return nil
				}
				return []string{name + " not ready"}
			},
			tasks: []func(context.Context) error{func(ctx context.Context) error {
				select {
				case err := <-f.fail:
					return err
				case <-ctx.Done():
					return nil
				}
			}}}, nil
	}
}

func TestSidecarStartsTheProxiesOnceRegisterIsReady(t *testing.T) {
	reg, in, out := &fakeRole{fail: make(chan error)}, &fakeRole{fail: make(chan error)}, &fakeRole{fail: make(chan error, 1)}
	states := []*roleState{{name: "register"}, {name: "inbound"}, {name: "outbound"}}
	prepare := map[string]prepareRole{"register": reg.prepare("register"), "inbound": in.prepare("inbound"), "outbound": out.prepare("outbound")}
	common := &commonFlags{poll: time.Second}
	done := make(chan error, 1)
	go func() {
		done <- runRoles(t.Context(), common, testConfig(t), "127.0.0.1:0", states, prepare, zaptest.NewLogger(t))
	}()
	readyz := func() string {
		rec := httptest.NewRecorder()
		aggregateHandler(states, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Body.String()
	}

	require.Eventually(t, reg.prepared.Load, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		return readyz() == "register: not ready: register not ready\ninbound: waiting for register to be ready\noutbound: waiting for register to be ready\n"
	},
		10*time.Second, 10*time.Millisecond, readyz())
	time.Sleep(3 * waitPoll) // several polls: the proxies still wait
	assert.False(t, in.prepared.Load(), "inbound started before register was ready")
	assert.False(t, out.prepared.Load(), "outbound started before register was ready")

	reg.ready.Store(true)
	require.Eventually(t, func() bool { return in.prepared.Load() && out.prepared.Load() }, 10*time.Second, 10*time.Millisecond)
	in.ready.Store(true)
	out.ready.Store(true)
	require.Eventually(t, func() bool { return readyz() == "register: ready\ninbound: ready\noutbound: ready\n" }, 10*time.Second, 10*time.Millisecond, readyz())

	out.fail <- errors.New("listener closed")
	select {
	case err := <-done:
		assert.EqualError(t, err, "role outbound: listener closed")
	case <-time.After(10 * time.Second):
		t.Fatal("a failed role did not end the sidecar")
	}
}

func TestSidecarWithoutRegisterStartsAtOnce(t *testing.T) {
	in := &fakeRole{fail: make(chan error)}
	states := []*roleState{{name: "inbound"}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- runRoles(ctx, &commonFlags{poll: time.Second}, testConfig(t), "127.0.0.1:0", states,
			map[string]prepareRole{"inbound": in.prepare("inbound")}, zaptest.NewLogger(t))
	}()
	require.Eventually(t, in.prepared.Load, 10*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err, "a stop by signal is no error")
	case <-time.After(10 * time.Second):
		t.Fatal("the sidecar did not stop")
	}
}

func TestSidecarRoleThatEndsOnItsOwnIsAnError(t *testing.T) {
	in := &fakeRole{fail: make(chan error, 1)}
	in.fail <- nil // the task returns at once without an error
	err := runRoles(t.Context(), &commonFlags{poll: time.Second}, testConfig(t), "127.0.0.1:0", []*roleState{{name: "inbound"}},
		map[string]prepareRole{"inbound": in.prepare("inbound")}, zaptest.NewLogger(t))
	assert.EqualError(t, err, "role inbound: a task ended on its own")
}

func TestSidecarStatusPortIsTheContract(t *testing.T) {
	assert.Equal(t, contract.StatusPortAuthbridge, sidecarStatusPort)
	ports, err := parsePorts(newInitCommand(&commonFlags{}).Flags().Lookup("always-exclude-inbound").DefValue)
	require.NoError(t, err)
	assert.Contains(t, ports, uint16(contract.StatusPortAuthbridge), "proxy-init must not redirect the kubelet's probes of the sidecar")
}
