package tracing_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing/tracingtest"
)

// goldens are the ConfigMaps kagenti-agenttrace renders (its golden files, read by path: the
// pillars import nothing of each other), so that the reader is proven on what the writer writes.
func goldens(t *testing.T) map[string]map[string]string {
	t.Helper()
	paths, err := filepath.Glob("../../../../agenttrace/internal/resources/testdata/*.golden.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, paths, "agenttrace's golden ConfigMaps")
	out := map[string]map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		var cm corev1.ConfigMap
		require.NoError(t, yaml.UnmarshalStrict(b, &cm), p)
		out[filepath.Base(p)] = cm.Data
	}
	return out
}

// writeFiles writes a ConfigMap's data as the kubelet projects it: a file per key.
func writeFiles(t *testing.T, dir string, data map[string]string) {
	t.Helper()
	for k, v := range data {
		require.NoError(t, os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644))
	}
}

// TestAuthbridgeReadsEveryAgentTraceGolden: every ConfigMap agenttrace renders loads, and what Load
// reads from the per-value files is what config.json says.
func TestAuthbridgeReadsEveryAgentTraceGolden(t *testing.T) {
	for name, data := range goldens(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, data)
			s, ok, err := tracing.Load(dir)
			require.NoError(t, err)
			var cfg struct {
				ServiceName string `json:"serviceName"`
				Exporters   []struct {
					Type, Endpoint, Protocol, Compression string
					Insecure                              bool
				}
				Sampling struct {
					Sampler string
					Arg     *json.Number `json:"arg"`
				}
				ResourceAttributes map[string]string `json:"resourceAttributes"`
			}
			require.NoError(t, json.Unmarshal([]byte(data["config.json"]), &cfg))
			var otlp *struct {
				Type, Endpoint, Protocol, Compression string
				Insecure                              bool
			}
			for i := range cfg.Exporters {
				if cfg.Exporters[i].Type == "otlp" && otlp == nil {
					otlp = &cfg.Exporters[i]
				}
			}
			if otlp == nil {
				assert.False(t, ok, "no OTLP exporter: nothing to export to")
				return
			}
			require.True(t, ok)
			assert.Equal(t, otlp.Endpoint, s.Endpoint)
			assert.Equal(t, otlp.Protocol, s.Protocol)
			assert.Equal(t, otlp.Compression, s.Compression)
			assert.Equal(t, otlp.Insecure, s.Insecure)
			assert.Equal(t, cfg.Sampling.Sampler, s.Sampler)
			assert.Equal(t, cfg.ServiceName, s.ServiceName)
			assert.Equal(t, cfg.ResourceAttributes, s.ResourceAttributes)
			_, err = tracing.NewProvider(s)
			assert.NoError(t, err, "the SDK takes the settings")
		})
	}
}

// TestNoFilesNoProvider: without the files (no AgentTrace, or the optional volume still empty)
// there is no provider: nil tracers, no exporter, no goroutine.
func TestNoFilesNoProvider(t *testing.T) {
	for name, dir := range map[string]string{"missing": filepath.Join(t.TempDir(), "absent"), "empty": t.TempDir()} {
		t.Run(name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			tr := tracing.New(dir, zap.NewNop())
			tr.Reload()
			assert.False(t, tr.On())
			assert.Nil(t, tr.Inbound())
			assert.Nil(t, tr.Outbound())
			assert.LessOrEqual(t, runtime.NumGoroutine(), before, "no exporter goroutine")
		})
	}
	var off *tracing.Tracing
	assert.Nil(t, off.Inbound(), "a nil Tracing is tracing off")
	assert.False(t, off.On())
}

func exportOne(t *testing.T, tr *tracing.Tracing, name string) {
	t.Helper()
	tracer := tr.Inbound()
	require.NotNil(t, tracer)
	_, span := tracer.Start(context.Background(), name, trace.WithSpanKind(trace.SpanKindServer))
	span.End()
	require.NoError(t, tr.ForceFlush(context.Background()))
}

// TestSeedGoldenExportsOverGRPC: the seed's files (gRPC, gzip, a ratio sampler, resource
// attributes), pointed at an in-test receiver, export the span with the workload's resource and
// kagenti.component.
func TestSeedGoldenExportsOverGRPC(t *testing.T) {
	rcv := tracingtest.NewGRPC(t)
	data := goldens(t)["seed.golden.yaml"]
	data[tracing.FileEndpoint], data[tracing.FileInsecure] = rcv.Endpoint, "true"
	data[tracing.FileSampler], data[tracing.FileSamplerArg] = "always_on", ""
	dir := t.TempDir()
	writeFiles(t, dir, data)
	tr := tracing.New(dir, zap.NewNop())
	tr.Reload()
	exportOne(t, tr, "seed")
	s := rcv.Wait(t, 1)[0]
	assert.Equal(t, "seed", s.Name)
	assert.Equal(t, "weather-agent", s.Resource["service.name"])
	assert.Equal(t, "2.1.0", s.Resource["service.version"])
	assert.Equal(t, "production", s.Resource["deployment.environment"])
	assert.Equal(t, tracing.Component, s.Resource[tracing.ComponentAttribute])
}

// TestRewrittenFilesSwitchTheEndpoint: when the kubelet rewrites the files, the next spans go
// to the new endpoint (over HTTP this time), without a restart; the old provider was flushed.
func TestRewrittenFilesSwitchTheEndpoint(t *testing.T) {
	first, second := tracingtest.NewGRPC(t), tracingtest.NewHTTP(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{tracing.FileEndpoint: first.Endpoint, tracing.FileInsecure: "true", tracing.FileServiceName: "weather"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	tr := tracing.New(dir, zap.NewNop())
	go func() { tr.Watch(ctx, 20*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, tr.On, 30*time.Second, 10*time.Millisecond)
	_, span := tr.Inbound().Start(ctx, "before")
	span.End() // not flushed: the switch must flush it

	writeFiles(t, dir, map[string]string{tracing.FileEndpoint: second.Endpoint, tracing.FileProtocol: tracing.ProtocolHTTP})
	require.Eventually(t, func() bool { return len(first.Named("before")) == 1 }, 30*time.Second, 10*time.Millisecond, "the replaced provider flushed its span")
	exportOne(t, tr, "after")
	assert.Equal(t, "after", second.Wait(t, 1)[0].Name)
	assert.Empty(t, first.Named("after"))
}

// TestMalformedFileIsLoggedAndChangesNothing: a file that cannot be used is logged with its
// name, and tracing stays as it was (off, or on with the previous endpoint).
func TestMalformedFileIsLoggedAndChangesNothing(t *testing.T) {
	rcv := tracingtest.NewHTTP(t)
	dir := t.TempDir()
	core, logs := observer.New(zapcore.WarnLevel)
	tr := tracing.New(dir, zap.New(core))
	writeFiles(t, dir, map[string]string{tracing.FileEndpoint: "collector:4317", tracing.FileSampler: "sometimes"})
	tr.Reload()
	assert.False(t, tr.On(), "off, as before")
	require.Equal(t, 1, logs.Len())
	assert.Contains(t, logs.All()[0].ContextMap()["error"], "sampler")

	writeFiles(t, dir, map[string]string{tracing.FileEndpoint: rcv.Endpoint, tracing.FileProtocol: tracing.ProtocolHTTP, tracing.FileSampler: "always_on"})
	tr.Reload()
	require.True(t, tr.On())
	for file, bad := range map[string]string{
		tracing.FileProtocol:           "carrier-pigeon",
		tracing.FileInsecure:           "yes",
		tracing.FileSamplerArg:         "2",
		tracing.FileResourceAttributes: "novalue",
		tracing.FileEndpoint:           "ftp://collector",
	} {
		t.Run(file, func(t *testing.T) {
			before := logs.Len()
			writeFiles(t, dir, map[string]string{file: bad, tracing.FileSampler: "traceidratio"})
			tr.Reload()
			require.Equal(t, before+1, logs.Len())
			assert.Contains(t, logs.All()[before].ContextMap()["error"], file, "the error names the file")
			require.True(t, tr.On(), "still exporting where it did")
			writeFiles(t, dir, map[string]string{tracing.FileEndpoint: rcv.Endpoint, tracing.FileProtocol: tracing.ProtocolHTTP,
				tracing.FileInsecure: "false", tracing.FileSamplerArg: "", tracing.FileResourceAttributes: "", tracing.FileSampler: "always_on"})
		})
	}
	exportOne(t, tr, "still")
	assert.Equal(t, "still", rcv.Wait(t, 1)[0].Name)
}

// TestNoOTLPExporterIsOff: an AgentTrace with only a console or zipkin exporter gives the
// authbridge nothing to export to.
func TestNoOTLPExporterIsOff(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{tracing.FileEndpoint: "collector:4317", tracing.FileTracesExporter: "console,zipkin"})
	_, ok, err := tracing.Load(dir)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.True(t, strings.HasPrefix(tracing.Method("BREW"), "_OTHER"))
}
