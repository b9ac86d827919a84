package sidecar

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/pkg/configmap/appprobe"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

// getAppProbe GETs the rewritten path of key from a status server serving probes, as the kubelet
// does, and returns the status code.
func getAppProbe(t *testing.T, probes map[string]appprobe.AppProbe, key string) int {
	t.Helper()
	srv := httptest.NewServer(AppProbeHandler(probes))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL+contract.AppProbePathPrefix+key, nil)
	require.NoError(t, err)
	req.Header.Set("User-Agent", "kube-probe/1.34")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func portOf(t *testing.T, rawURL string) int32 {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	p, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	return int32(p)
}

// The recorded httpGet runs against 127.0.0.1 with its own path, query, headers (Host included)
// and the kubelet's User-Agent; the app's 2xx/3xx pass, 4xx/5xx fail. A named port is reached on
// the port the injector resolved (appPort).
func TestAppProbeHTTPRunsTheOriginalOnLoopback(t *testing.T) {
	var got *http.Request
	status := http.StatusOK
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		w.WriteHeader(status)
	}))
	defer app.Close()
	probes := map[string]appprobe.AppProbe{"agent/readyz": {
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ping?deep=1", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP,
			HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "ready"}, {Name: "Host", Value: "agent.local"}}}},
		AppPort: portOf(t, app.URL),
	}}

	require.Equal(t, http.StatusOK, getAppProbe(t, probes, "agent/readyz"))
	require.Equal(t, "/ping", got.URL.Path)
	require.Equal(t, "deep=1", got.URL.RawQuery)
	require.Equal(t, "ready", got.Header.Get("X-Probe"))
	require.Equal(t, "agent.local", got.Host)
	require.Equal(t, "kube-probe/1.34", got.UserAgent())
	host, _, err := net.SplitHostPort(got.RemoteAddr)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host, "the app is probed on loopback")

	status = http.StatusFound
	require.Equal(t, http.StatusOK, getAppProbe(t, probes, "agent/readyz"), "a redirect passes, as with the kubelet")
	status = http.StatusUnauthorized
	require.Equal(t, http.StatusServiceUnavailable, getAppProbe(t, probes, "agent/readyz"))
}

// HTTPS probes do not verify the app's certificate, as the kubelet's do not.
func TestAppProbeHTTPSSkipsVerification(t *testing.T) {
	app := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer app.Close()
	probes := map[string]appprobe.AppProbe{"agent/livez": {ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/healthz", Port: intstr.FromInt32(portOf(t, app.URL)), Scheme: corev1.URISchemeHTTPS}}}}
	require.Equal(t, http.StatusOK, getAppProbe(t, probes, "agent/livez"))
}

// A probe slower than its timeout fails.
func TestAppProbeTimeout(t *testing.T) {
	release := make(chan struct{})
	app := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer app.Close()
	defer close(release)
	probes := map[string]appprobe.AppProbe{"agent/livez": {ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/", Port: intstr.FromInt32(portOf(t, app.URL))}}, TimeoutSeconds: 1}}
	require.Equal(t, http.StatusServiceUnavailable, getAppProbe(t, probes, "agent/livez"))
}

// tcpSocket passes when the app accepts a connection.
func TestAppProbeTCPConnects(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	probes := map[string]appprobe.AppProbe{"agent/livez": {ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(port)}}}}
	require.Equal(t, http.StatusOK, getAppProbe(t, probes, "agent/livez"))
	require.NoError(t, ln.Close())
	require.Equal(t, http.StatusServiceUnavailable, getAppProbe(t, probes, "agent/livez"))
}

// grpc runs grpc.health.v1 Check against grpc-go's own health server: SERVING passes, NOT_SERVING
// and an unknown service fail.
func TestAppProbeGRPCHealthCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	probe := func(service *string) map[string]appprobe.AppProbe {
		return map[string]appprobe.AppProbe{"agent/startupz": {ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: port, Service: service}}}}
	}

	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("weather", healthpb.HealthCheckResponse_SERVING)
	require.Equal(t, http.StatusOK, getAppProbe(t, probe(nil), "agent/startupz"))
	require.Equal(t, http.StatusOK, getAppProbe(t, probe(ptr.To("weather")), "agent/startupz"))

	hs.SetServingStatus("weather", healthpb.HealthCheckResponse_NOT_SERVING)
	require.Equal(t, http.StatusServiceUnavailable, getAppProbe(t, probe(ptr.To("weather")), "agent/startupz"))
	require.Equal(t, http.StatusServiceUnavailable, getAppProbe(t, probe(ptr.To("unknown")), "agent/startupz"))
}

// Only recorded probes are run: any other path under the prefix is 404, so the status port, which
// needs no token, reaches no other port or path of the app.
func TestAppProbeOnlyRunsRecordedProbes(t *testing.T) {
	var hits int
	app := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits++ }))
	defer app.Close()
	probes := map[string]appprobe.AppProbe{"agent/readyz": {ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/ping", Port: intstr.FromInt32(portOf(t, app.URL))}}}}
	for _, key := range []string{"agent/livez", "other/readyz", "agent/readyz/../../secret", ""} {
		require.Equal(t, http.StatusNotFound, getAppProbe(t, probes, key), key)
	}
	require.Zero(t, hits)
	require.Equal(t, http.StatusNotFound, getAppProbe(t, nil, "agent/readyz"), "no probes recorded: nothing served")
}

// The injector's line in defaults.env is what the sidecar serves: read through IdentityLookup and
// SourceFromEnv like every other identity default (an unknown name there would stop the process).
func TestAppProbesFromTheIdentityDefaults(t *testing.T) {
	line, err := appprobe.Format(map[string]appprobe.AppProbe{"agent/readyz": {ProbeHandler: corev1.ProbeHandler{
		TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8081)}}, TimeoutSeconds: 2}})
	require.NoError(t, err)
	dir := t.TempDir()
	writeFile(t, dir, "defaults.env", "KAGENTI_WORKLOAD=weather-agent\n"+line)
	t.Setenv("KAGENTI_APP_PROBES", "")
	src, err := SourceFromEnv(t.TempDir(), dir)
	require.NoError(t, err)
	require.Equal(t, int32(8081), src.AppProbes["agent/readyz"].Port())
	require.Equal(t, int32(2), src.AppProbes["agent/readyz"].TimeoutSeconds)

	writeFile(t, dir, "defaults.env", "KAGENTI_APP_PROBES={\"agent/readyz\":{\"httpGet\":{\"path\":\"/\",\"port\":\"http\"}}}\n")
	_, err = SourceFromEnv(t.TempDir(), dir)
	require.ErrorContains(t, err, "KAGENTI_APP_PROBES")
	require.ErrorContains(t, err, "appPort")
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
}
