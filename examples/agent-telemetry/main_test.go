package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	yaml "go.yaml.in/yaml/v3"

	"github.com/kagenti/platform/examples/agent-telemetry/traceconfig"
)

// loadFiles writes files into a directory and loads it as the agent does.
func loadFiles(t *testing.T, files map[string]string) *traceconfig.Config {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := traceconfig.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCaptureFlagsDecideTheRecordedContent: the genai_* files, as Load reads them, decide which
// GenAI content attributes the tool span carries.
func TestCaptureFlagsDecideTheRecordedContent(t *testing.T) {
	const (
		input  = "gen_ai.input.messages"
		output = "gen_ai.output.messages"
		model  = "gen_ai.request.model"
		temp   = "gen_ai.request.temperature"
	)
	for _, c := range []struct {
		name                                     string
		enabled, prompts, completions, modelPars string
		want                                     []string
	}{
		{"off", "false", "false", "false", "false", nil},
		{"enabled, nothing captured", "true", "false", "false", "false", nil},
		{"prompts", "true", "true", "false", "false", []string{input}},
		{"completions", "true", "false", "true", "false", []string{output}},
		{"model parameters", "true", "false", "false", "true", []string{model, temp}},
		{"everything", "true", "true", "true", "true", []string{input, output, model, temp}},
		{"flags without genai_enabled", "false", "true", "true", "true", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := loadFiles(t, map[string]string{
				traceconfig.FileEnv:                         "OTEL_TRACES_SAMPLER=always_on\n",
				traceconfig.FileGenAIEnabled:                c.enabled,
				traceconfig.FileGenAICapturePrompts:         c.prompts,
				traceconfig.FileGenAICaptureCompletions:     c.completions,
				traceconfig.FileGenAICaptureModelParameters: c.modelPars,
			})
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			callTool(context.Background(), tp.Tracer("test"), cfg.GenAI)
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("want one span, got %d", len(spans))
			}
			s := spans[0]
			got := map[attribute.Key]attribute.Value{}
			for _, kv := range s.Attributes() {
				got[kv.Key] = kv.Value
			}
			if s.Name() != "execute_tool get_weather" || got["gen_ai.operation.name"].AsString() != "execute_tool" ||
				got["gen_ai.tool.name"].AsString() != "get_weather" {
				t.Errorf("span %q with %v: want the execute_tool span of get_weather", s.Name(), got)
			}
			for _, k := range []string{input, output, model, temp} {
				_, has := got[attribute.Key(k)]
				if want := slices.Contains(c.want, k); has != want {
					t.Errorf("%s recorded: %v, want %v", k, has, want)
				}
			}
		})
	}
}

// TestDeprecatedExporterIsLogged: the seed's AgentTrace has a jaeger exporter, which config.json
// marks deprecated; the agent says so once, with the reason.
func TestDeprecatedExporterIsLogged(t *testing.T) {
	raw, err := os.ReadFile(filepath.FromSlash("../../agenttrace/internal/resources/testdata/seed.golden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct{ Data map[string]string }
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	warnDeprecated(slog.New(slog.NewTextHandler(&buf, nil)), loadFiles(t, cm.Data))
	out := buf.String()
	if strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "type=jaeger") ||
		!strings.Contains(out, "OpenTelemetry SDKs removed the Jaeger protocol") {
		t.Errorf("want one warning for the jaeger exporter, got:\n%s", out)
	}

	buf.Reset()
	delete(cm.Data, traceconfig.FileJSON)
	warnDeprecated(slog.New(slog.NewTextHandler(&buf, nil)), loadFiles(t, cm.Data))
	if buf.Len() != 0 {
		t.Errorf("without config.json: %s", buf.String())
	}
}
