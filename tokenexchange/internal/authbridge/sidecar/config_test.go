package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// configMapVolume imitates the kubelet's atomic writer: each update writes a new timestamped
// directory, points ..data at it with a rename, and the keys are symlinks through ..data.
type configMapVolume struct {
	dir string
	gen int
}

func (v *configMapVolume) write(t *testing.T, files map[string]string) {
	t.Helper()
	v.gen++
	ts := fmt.Sprintf("..2026_11_26_%06d", v.gen)
	require.NoError(t, os.MkdirAll(filepath.Join(v.dir, ts), 0o755))
	for k, val := range files {
		require.NoError(t, os.WriteFile(filepath.Join(v.dir, ts, k), []byte(val), 0o644))
		link := filepath.Join(v.dir, k)
		if _, err := os.Lstat(link); err != nil {
			require.NoError(t, os.Symlink(filepath.Join("..data", k), link))
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	require.NoError(t, os.Symlink(ts, tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(v.dir, "..data")))
}

func testSource(dir string) Source {
	p := func(i int32) *int32 { return &i }
	uid := int64(1337)
	return Source{
		Dir:      dir,
		Workload: authconfig.Workload{Namespace: "agents", Name: "w", PodName: "w-1", ServiceAccount: "sa"},
		Defaults: authconfig.Spec{
			Spiffe: &authconfig.SpiffeSpec{TrustDomain: "cluster.local", SocketPath: "/run/spire/agent-sockets/agent.sock", Audience: "kagenti-agents"},
			ClientRegistration: &authconfig.ClientRegistrationSpec{Keycloak: &authconfig.KeycloakSpec{
				URL: "http://keycloak:8080", Realm: "default", ClientNameTemplate: "{{.Namespace}}/{{.WorkloadName}}"}},
			Inbound: &authconfig.InboundSpec{Port: p(8080), TargetPort: p(8081)},
			Outbound: &authconfig.OutboundSpec{
				TrafficInterception: &authconfig.TrafficInterceptionSpec{ProxyPort: p(15123), ProxyUID: &uid},
				TokenExchange:       &authconfig.TokenExchangeSpec{DefaultTarget: &authconfig.ExchangeTarget{Audience: "downstream"}},
			},
		},
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConfigFollowsConfigMapUpdates(t *testing.T) {
	vol := &configMapVolume{dir: t.TempDir()}
	cfg, err := NewConfig(testSource(vol.dir), zaptest.NewLogger(t))
	require.NoError(t, err)
	assert.Empty(t, cfg.Current().ContentHash, "no ConfigMap yet: the defaults alone")
	assert.Equal(t, "downstream", cfg.Current().Config.Outbound.TokenExchange.DefaultTarget.Audience)

	var changes atomic.Int32
	cfg.OnChange(func(Snapshot) { changes.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cfg.Run(ctx, time.Hour) // events only: the poll would hide a missed event

	vol.write(t, map[string]string{"config.yaml": "outbound: {tokenExchange: {defaultTarget: {audience: first}}}\n"})
	waitFor(t, "the first ConfigMap content", func() bool {
		return cfg.Current().Config.Outbound.TokenExchange.DefaultTarget.Audience == "first"
	})
	want := authconfig.ContentHash(map[string][]byte{"config.yaml": []byte("outbound: {tokenExchange: {defaultTarget: {audience: first}}}\n")})
	assert.Equal(t, want, cfg.Current().ContentHash)

	vol.write(t, map[string]string{"config.yaml": "outbound: {tokenExchange: {defaultTarget: {audience: second}}}\n"})
	waitFor(t, "the second ConfigMap content", func() bool {
		return cfg.Current().Config.Outbound.TokenExchange.DefaultTarget.Audience == "second"
	})
	// Subscribers run after the new snapshot is visible: wait for the notification, not the value.
	waitFor(t, "two change notifications", func() bool { return changes.Load() == 2 })
	assert.NoError(t, cfg.Err())
}

func TestConfigKeepsLastGoodOnMalformedFile(t *testing.T) {
	vol := &configMapVolume{dir: t.TempDir()}
	vol.write(t, map[string]string{"config.yaml": "inbound: {validation: {requiredScopes: [a]}}\n"})
	cfg, err := NewConfig(testSource(vol.dir), zaptest.NewLogger(t))
	require.NoError(t, err)
	good := cfg.Current()

	for name, bad := range map[string]string{
		"not YAML":      "inbound: [",
		"unknown field": "inbound: {prot: 1}\n",
		"invalid value": "inbound: {targetPort: 8080}\n",
	} {
		t.Run(name, func(t *testing.T) {
			vol.write(t, map[string]string{"config.yaml": bad})
			cfg.Reload()
			require.Error(t, cfg.Err())
			assert.Equal(t, good.Config, cfg.Current().Config, "the last good configuration stays in effect")
			st := StatusOf("inbound", cfg, nil, nil)
			assert.False(t, st.Ready)
			assert.Equal(t, good.ContentHash, st.ContentHash, "the status reports the content in effect")
			assert.NotEmpty(t, st.ConfigError)
			if name == "invalid value" {
				assert.Contains(t, cfg.Err().Error(), "inbound.targetPort: must differ from inbound.port (8080)")
			}
		})
	}

	vol.write(t, map[string]string{"config.yaml": "inbound: {validation: {requiredScopes: [b]}}\n"})
	cfg.Reload()
	require.NoError(t, cfg.Err())
	assert.Equal(t, []string{"b"}, cfg.Current().Config.Inbound.Validation.RequiredScopes)
	assert.True(t, StatusOf("inbound", cfg, nil, nil).Ready)
}

func TestConfigStartsOnDefaultsWhenTheFileIsBad(t *testing.T) {
	vol := &configMapVolume{dir: t.TempDir()}
	vol.write(t, map[string]string{"config.yaml": "nonsense: true\n"})
	cfg, err := NewConfig(testSource(vol.dir), zaptest.NewLogger(t))
	require.NoError(t, err)
	assert.Error(t, cfg.Err())
	assert.Empty(t, cfg.Current().ContentHash)
	assert.False(t, StatusOf("outbound", cfg, nil, nil).Ready)

	src := testSource(vol.dir)
	src.Defaults.Inbound.Port = nil
	_, err = NewConfig(src, zap.NewNop())
	require.Error(t, err, "invalid defaults are a start failure")
	assert.Contains(t, err.Error(), "inbound.port")
}

func TestConfigHoldsStartupSettings(t *testing.T) {
	vol := &configMapVolume{dir: t.TempDir()}
	cfg, err := NewConfig(testSource(vol.dir), zaptest.NewLogger(t))
	require.NoError(t, err)
	vol.write(t, map[string]string{"config.yaml": "outbound: {trafficInterception: {proxyPort: 15001}, tokenExchange: {defaultTarget: {audience: new}}}\n"})
	cfg.Reload()
	c := cfg.Current().Config
	assert.Equal(t, int32(15123), c.Outbound.Interception.ProxyPort, "still listening where traffic is redirected")
	assert.Equal(t, "new", c.Outbound.TokenExchange.DefaultTarget.Audience)
	assert.Equal(t, []string{"outbound.trafficInterception.proxyPort"}, cfg.PendingRestart())
}

func TestConfigDirectoryAppearsLater(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "token-exchange")
	cfg, err := NewConfig(testSource(dir), zaptest.NewLogger(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cfg.Run(ctx, 20*time.Millisecond)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	(&configMapVolume{dir: dir}).write(t, map[string]string{"config.yaml": "outbound: {tokenExchange: {defaultTarget: {audience: late}}}\n"})
	waitFor(t, "the late ConfigMap", func() bool {
		return cfg.Current().Config.Outbound.TokenExchange.DefaultTarget.Audience == "late"
	})
}

func TestAdminEndpoints(t *testing.T) {
	vol := &configMapVolume{dir: t.TempDir()}
	vol.write(t, map[string]string{"config.yaml": "{}\n"})
	cfg, err := NewConfig(testSource(vol.dir), zaptest.NewLogger(t))
	require.NoError(t, err)
	waiting := []string{"no client credentials yet"}
	srv := httptest.NewServer(AdminHandler("outbound", cfg, func() []string { return waiting }, nil, nil))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, _ := get("/healthz")
	assert.Equal(t, 200, code)
	code, body := get("/readyz")
	assert.Equal(t, 503, code)
	assert.Contains(t, body, "no client credentials yet")
	waiting = nil
	code, _ = get("/readyz")
	assert.Equal(t, 200, code)

	resp, err := http.Get(srv.URL + "/status")
	require.NoError(t, err)
	defer resp.Body.Close()
	var st Status
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	assert.Equal(t, "outbound", st.Role)
	assert.True(t, st.Ready)
	assert.Equal(t, authconfig.ContentHash(map[string][]byte{"config.yaml": []byte("{}\n")}), st.ContentHash)
	assert.Equal(t, cfg.Current().Config.Hash(), st.ConfigHash)
}

// Injection v4 projects the ConfigMap's config.yaml into the identity volume, beside the
// downward-API files: --config-dir and --identity-dir are one directory, updated by the kubelet's
// one ..data swap. The identity files are not ConfigMap content (the hash is the controller's), a
// change of config.yaml is followed, and a second watcher of the same directory (another role's)
// sees the changes too.
func TestConfigInTheIdentityDirectory(t *testing.T) {
	for _, n := range authconfig.EnvNames() {
		t.Setenv(n, "")
	}
	vol := &configMapVolume{dir: t.TempDir()}
	identity := map[string]string{
		authconfig.IdentityDefaultsFile: "KAGENTI_WORKLOAD=weather-agent\nKAGENTI_DEFAULT_AUDIENCE=downstream\n",
		authconfig.EnvPodNamespace:      "agents",
	}
	vol.write(t, identity) // the optional ConfigMap does not exist yet
	src, err := SourceFromEnv(vol.dir, vol.dir)
	require.NoError(t, err)
	host, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, authconfig.Workload{Namespace: "agents", Name: "weather-agent", PodName: host, ServiceAccount: "default"}, src.Workload,
		"no POD_NAME file: the pod's name is the hostname")
	assert.Equal(t, authconfig.PodNameFromHostname, src.PodNameFrom)
	cfg, err := NewConfig(src, zaptest.NewLogger(t))
	require.NoError(t, err)
	assert.Empty(t, cfg.Current().ContentHash, "the identity files are not ConfigMap content")
	assert.Equal(t, "downstream", cfg.Current().Config.Outbound.TokenExchange.DefaultTarget.Audience)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cfg.Run(ctx, time.Hour) // events only: the poll would hide a missed event
	var other atomic.Int32
	go WatchDir(ctx, vol.dir, time.Hour, zaptest.NewLogger(t), func() { other.Add(1) })
	waitFor(t, "the second watcher's first look", func() bool { return other.Load() == 1 })

	for i, audience := range []string{"first", "second"} {
		content := "outbound: {tokenExchange: {defaultTarget: {audience: " + audience + "}}}\n"
		files := map[string]string{authconfig.ConfigFile: content}
		for k, v := range identity {
			files[k] = v
		}
		vol.write(t, files)
		waitFor(t, "config.yaml "+audience, func() bool {
			return cfg.Current().Config.Outbound.TokenExchange.DefaultTarget.Audience == audience
		})
		assert.Equal(t, authconfig.ContentHash(map[string][]byte{authconfig.ConfigFile: []byte(content)}), cfg.Current().ContentHash,
			"the hash covers the ConfigMap's key alone, as the controller's kagenti.io/content-hash")
		waitFor(t, "the second watcher sees the change", func() bool { return other.Load() >= int32(i+2) })
	}
	assert.NoError(t, cfg.Err())
}

// A role that started before its ConfigMap reached the volume says so in its status, for good:
// the content arriving later changes the run-time settings, not the startup ones, and
// PendingRestart names those the content changes. A role that started on content does not.
func TestStatusSaysTheRoleStartedWithoutContent(t *testing.T) {
	vol := &configMapVolume{dir: t.TempDir()}
	cfg, err := NewConfig(testSource(vol.dir), zaptest.NewLogger(t))
	require.NoError(t, err)
	st := StatusOf("outbound", cfg, nil, nil)
	assert.True(t, st.StartedWithoutContent, "an empty volume at start")
	assert.Empty(t, st.PendingRestart)

	vol.write(t, map[string]string{"config.yaml": "spiffe: {audience: team-a}\n"})
	cfg.Reload()
	st = StatusOf("outbound", cfg, nil, nil)
	assert.True(t, st.StartedWithoutContent, "the content came after the start")
	assert.Equal(t, []string{"spiffe.audience"}, st.PendingRestart)
	assert.NotEmpty(t, st.ContentHash, "the run-time settings follow the content")

	restarted, err := NewConfig(testSource(vol.dir), zaptest.NewLogger(t))
	require.NoError(t, err)
	st = StatusOf("outbound", restarted, nil, nil)
	assert.False(t, st.StartedWithoutContent, "a restart on the content")
	assert.Empty(t, st.PendingRestart)
}
