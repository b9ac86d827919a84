package traceconfig

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
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

// writeAtomically replaces a file by a rename, as kubelet's symlink swap replaces a ConfigMap's
// files: a poll never sees it half written. The temporary name starts with "..", which Load's
// version hash skips, as it skips kubelet's.
func writeAtomically(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "..tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
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

// injectorGoldens are the injector's golden Deployments (what it renders for each input).
const injectorGoldens = "../../../injector/internal/inject/testdata/golden/deployment.*.yaml"

// Dir, in each container the injector gives the trace mount, is that mount: since injection v4
// the injector sets no KAGENTI_TRACE_DIR, so the default must be its mount path (a container's own
// variable, which the injector keeps, must name the mount too).
func TestDirIsTheInjectedMount(t *testing.T) {
	files, err := filepath.Glob(filepath.FromSlash(injectorGoldens))
	if err != nil || len(files) == 0 {
		t.Fatalf("the injector's golden Deployments moved (%v): update injectorGoldens", err)
	}
	type container struct {
		Name         string
		Env          []struct{ Name, Value string }
		VolumeMounts []struct {
			Name      string
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	var seen int
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Spec struct {
				Template struct {
					Spec struct{ Containers []container }
				}
			}
		}
		if err := yaml.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, m := range c.VolumeMounts {
				if m.Name != "kagenti-trace" {
					continue
				}
				seen++
				t.Setenv("KAGENTI_TRACE_DIR", "")
				for _, e := range c.Env {
					if e.Name == "KAGENTI_TRACE_DIR" {
						t.Setenv("KAGENTI_TRACE_DIR", e.Value)
					}
				}
				if Dir() != m.MountPath {
					t.Errorf("%s, container %s: Dir() is %q, the trace volume is mounted at %q", filepath.Base(file), c.Name, Dir(), m.MountPath)
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no golden container mounts kagenti-trace")
	}
}

// Watch reports the initial state, then each change, and nothing when nothing changed.
func TestWatchSeesChanges(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *Config, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(ctx, dir, 10*time.Millisecond, func(c *Config, err error) {
			if err != nil {
				t.Error(err)
			}
			select {
			case got <- c:
			case <-ctx.Done():
			}
		})
	}()
	// Watch ends before the test does (and before t.TempDir is removed under it).
	defer func() { cancel(); <-done }()
	if c := <-got; c != nil {
		t.Fatalf("empty directory: want nil config, got %+v", c)
	}
	writeAtomically(t, dir, "otel.env", otelEnv)
	first := <-got
	if first == nil || first.Env["OTEL_TRACES_SAMPLER_ARG"] != "0.1" {
		t.Fatalf("first config %+v", first)
	}
	writeAtomically(t, dir, "otel.env", "OTEL_TRACES_SAMPLER=always_on\n")
	second := <-got
	if second == nil || second.Env["OTEL_TRACES_SAMPLER"] != "always_on" || second.Version == first.Version {
		t.Fatalf("second config %+v", second)
	}
}
