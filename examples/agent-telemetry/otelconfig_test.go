package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/otelconf"
	otelconfx "go.opentelemetry.io/contrib/otelconf/x"
	"go.opentelemetry.io/otel/attribute"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	yaml "go.yaml.in/yaml/v3"
)

// sdkConfigMatrix is the agenttrace controller's otel-config.yaml for every exporter/sampler
// combination its API allows (agenttrace/internal/resources keeps the file equal to its rendering).
const sdkConfigMatrix = "../../agenttrace/internal/resources/testdata/sdkconfig/matrix.golden.yaml"

type matrix struct {
	ServiceName        string            `yaml:"serviceName"`
	ResourceAttributes map[string]string `yaml:"resourceAttributes"`
	Files              []struct {
		Name       string `yaml:"name"`
		Sampler    string `yaml:"sampler"`
		Rate       string `yaml:"rate"`
		Prometheus bool   `yaml:"prometheus"`
		File       string `yaml:"file"`
	} `yaml:"files"`
}

// sdk is what the SDKs of both parsers offer.
type sdk interface {
	TracerProvider() trace.TracerProvider
	Shutdown(context.Context) error
}

// TestOTelConfigBuildsAnSDK builds an OpenTelemetry Go SDK from every otel-config.yaml the
// controller can render, with the stable parser (otelconf, file_format 1.0) and the experimental
// one (otelconf/x), through NewSDK, not just the parser. The stable SDK refuses the files with a
// Prometheus reader (prometheus/development is experimental: only otelconf/x builds it); every
// other file builds with both.
func TestOTelConfigBuildsAnSDK(t *testing.T) {
	data, err := os.ReadFile(filepath.FromSlash(sdkConfigMatrix))
	if err != nil {
		t.Fatal(err)
	}
	var m matrix
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Files) < 100 {
		t.Fatalf("%s has %d files; expected every combination", sdkConfigMatrix, len(m.Files))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	want := map[string]string{"service.name": m.ServiceName}
	for k, v := range m.ResourceAttributes {
		want[k] = v
	}
	for _, c := range m.Files {
		t.Run(c.Name, func(t *testing.T) {
			file := []byte(c.File)
			stable, err := otelconf.ParseYAML(file)
			if err != nil {
				t.Fatalf("otelconf.ParseYAML: %v\n%s", err, file)
			}
			s, err := otelconf.NewSDK(otelconf.WithContext(ctx), otelconf.WithOpenTelemetryConfiguration(*stable))
			switch {
			case c.Prometheus && err == nil:
				_ = s.Shutdown(ctx)
				t.Fatal("the stable otelconf built a prometheus/development reader; update docs/agenttrace.md")
			case c.Prometheus:
				t.Logf("stable otelconf, as documented: %v", err)
			case err != nil:
				t.Fatalf("otelconf.NewSDK: %v\n%s", err, file)
			default:
				checkSampling(ctx, t, &s, c.Sampler, c.Rate)
			}

			experimental, err := otelconfx.ParseYAML(file)
			if err != nil {
				t.Fatalf("otelconf/x ParseYAML: %v\n%s", err, file)
			}
			if c.Prometheus {
				listenOnLoopback(t, experimental)
			}
			x, err := otelconfx.NewSDK(otelconfx.WithContext(ctx), otelconfx.WithOpenTelemetryConfiguration(*experimental))
			if err != nil {
				t.Fatalf("otelconf/x NewSDK: %v\n%s", err, file)
			}
			checkResource(t, x.Resource(), want) // the stable SDK does not expose its resource
			checkSampling(ctx, t, &x, c.Sampler, c.Rate)
		})
	}
}

// listenOnLoopback moves the Prometheus reader's listener from the rendered 0.0.0.0:9464 (what a
// pod wants) to a free loopback port, so that tests running at the same time do not collide.
func listenOnLoopback(t *testing.T, cfg *otelconfx.OpenTelemetryConfiguration) {
	t.Helper()
	if cfg.MeterProvider == nil || len(cfg.MeterProvider.Readers) != 1 || cfg.MeterProvider.Readers[0].Pull == nil {
		t.Fatal("want one pull reader")
	}
	p := cfg.MeterProvider.Readers[0].Pull.Exporter.PrometheusDevelopment
	if p == nil || p.Host == nil || p.Port == nil || *p.Host != "0.0.0.0" || *p.Port != 9464 {
		t.Fatalf("want a prometheus/development reader on 0.0.0.0:9464, got %+v", p)
	}
	host, port := "127.0.0.1", 0
	p.Host, p.Port = &host, &port
}

func checkResource(t *testing.T, res *sdkresource.Resource, want map[string]string) {
	t.Helper()
	if res == nil {
		t.Fatal("no resource")
	}
	for k, v := range want {
		if got, ok := res.Set().Value(attribute.Key(k)); !ok || got.AsString() != v {
			t.Errorf("resource attribute %s = %q (present %v), want %q", k, got.AsString(), ok, v)
		}
	}
}

// checkSampling: the SDK samples a root span as the spec says, and shuts down cleanly.
func checkSampling(ctx context.Context, t *testing.T, s sdk, sampler, rate string) {
	t.Helper()
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := s.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}()
	// Not ended: ending would export it (to stdout, or towards collectors that do not exist here).
	_, span := s.TracerProvider().Tracer("test").Start(ctx, "tool_execution")
	sampled := span.SpanContext().IsSampled()
	switch {
	case sampler == "default" || sampler == "always_on":
		if !sampled {
			t.Errorf("sampler %s did not sample a root span", sampler)
		}
	case sampler == "always_off" || rate == "0":
		if sampled {
			t.Errorf("sampler %s rate %q sampled a root span", sampler, rate)
		}
	}
}
