package traceconfig

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A trimmed copy of what kagenti-agenttrace renders (see agenttrace/internal/resources/testdata).
const otelEnv = `# OpenTelemetry SDK environment, rendered by kagenti-agenttrace. Do not edit.
OTEL_SERVICE_NAME=weather-agent
OTEL_RESOURCE_ATTRIBUTES=deployment.environment=production,service.name=weather-agent
OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector.observability:4317
OTEL_TRACES_SAMPLER=traceidratio
OTEL_TRACES_SAMPLER_ARG=0.1
MLFLOW_EXPERIMENT_NAME='weather agent'
`

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "otel.env", otelEnv)
	write(t, dir, "otel_endpoint", "otel-collector.observability:4317\n")
	write(t, dir, "otel_insecure", "true")
	cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Endpoint != "otel-collector.observability:4317" || !cfg.Insecure {
		t.Errorf("endpoint %q insecure %v", cfg.Endpoint, cfg.Insecure)
	}
	want := map[string]string{
		"OTEL_SERVICE_NAME":       "weather-agent",
		"OTEL_TRACES_SAMPLER":     "traceidratio",
		"OTEL_TRACES_SAMPLER_ARG": "0.1",
		"MLFLOW_EXPERIMENT_NAME":  "weather agent",
	}
	for k, v := range want {
		if cfg.Env[k] != v {
			t.Errorf("%s = %q, want %q", k, cfg.Env[k], v)
		}
	}
}

func TestLoadNotConfigured(t *testing.T) {
	if _, err := Load(t.TempDir()); !errors.Is(err, ErrNotConfigured) {
		t.Fatalf("want ErrNotConfigured, got %v", err)
	}
}

func TestParseEnvRejectsGarbage(t *testing.T) {
	if _, err := ParseEnv("OTEL_SERVICE_NAME\n"); err == nil {
		t.Fatal("want an error for a line without '='")
	}
}

func TestDirFromEnvironment(t *testing.T) {
	t.Setenv("KAGENTI_TRACE_DIR", "/tmp/x")
	if Dir() != "/tmp/x" {
		t.Fatal(Dir())
	}
	t.Setenv("KAGENTI_TRACE_DIR", "")
	if Dir() != DefaultDir {
		t.Fatal(Dir())
	}
}

// Watch reports the initial state, then each change, and nothing when nothing changed.
func TestWatchSeesChanges(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan *Config, 8)
	go Watch(ctx, dir, 10*time.Millisecond, func(c *Config, err error) {
		if err != nil {
			t.Error(err)
		}
		got <- c
	})
	if c := <-got; c != nil {
		t.Fatalf("empty directory: want nil config, got %+v", c)
	}
	write(t, dir, "otel.env", otelEnv)
	first := <-got
	if first == nil || first.Env["OTEL_TRACES_SAMPLER_ARG"] != "0.1" {
		t.Fatalf("first config %+v", first)
	}
	write(t, dir, "otel.env", "OTEL_TRACES_SAMPLER=always_on\n")
	second := <-got
	if second == nil || second.Env["OTEL_TRACES_SAMPLER"] != "always_on" || second.Version == first.Version {
		t.Fatalf("second config %+v", second)
	}
}
