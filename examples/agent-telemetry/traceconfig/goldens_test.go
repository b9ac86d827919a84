package traceconfig

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// agenttraceGoldens are the trace ConfigMaps agenttrace renders for its test inputs
// (agenttrace/internal/resources keeps them equal to its rendering).
const agenttraceGoldens = "../../../agenttrace/internal/resources/testdata/*.golden.yaml"

// goldenConfigMaps returns the data of every agenttrace golden ConfigMap, by file name.
func goldenConfigMaps(t *testing.T) map[string]map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.FromSlash(agenttraceGoldens))
	if err != nil || len(files) == 0 {
		t.Fatalf("agenttrace's golden ConfigMaps moved (%v): update agenttraceGoldens", err)
	}
	out := map[string]map[string]string{}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var cm struct {
			Kind string
			Data map[string]string
		}
		if err := yaml.Unmarshal(raw, &cm); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if cm.Kind != "ConfigMap" || len(cm.Data) == 0 {
			t.Fatalf("%s: want a ConfigMap with data, got kind %q and %d keys", file, cm.Kind, len(cm.Data))
		}
		out[filepath.Base(file)] = cm.Data
	}
	return out
}

// unknownKeys returns the keys of data that are not in Files.
func unknownKeys(data map[string]string) []string {
	var out []string
	for k := range data {
		if !slices.Contains(Files, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// writeFiles writes data as the kubelet would project it: one file per key.
func writeFiles(t *testing.T, data map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range data {
		write(t, dir, k, v)
	}
	return dir
}

// The check that every rendered key is known catches a key traceconfig does not read.
func TestUnknownKeysFindsANewKey(t *testing.T) {
	for name, data := range goldenConfigMaps(t) {
		withNew := maps.Clone(data)
		withNew["otel_new_setting"] = "x"
		if got := unknownKeys(withNew); !slices.Equal(got, []string{"otel_new_setting"}) {
			t.Errorf("%s plus otel_new_setting: unknown keys %v", name, got)
		}
	}
}

// TestLoadReadsEveryAgentTraceGolden loads every trace ConfigMap agenttrace renders in its goldens:
// every key is one traceconfig reads, Load accepts the files (config.json with no unknown field),
// and each per-value file says what otel.env and config.json say.
func TestLoadReadsEveryAgentTraceGolden(t *testing.T) {
	for name, data := range goldenConfigMaps(t) {
		t.Run(name, func(t *testing.T) {
			if unknown := unknownKeys(data); len(unknown) > 0 {
				t.Errorf("agenttrace renders %v, which traceconfig does not read: add them to Files and Load", unknown)
			}
			cfg, err := Load(writeFiles(t, data))
			if err != nil {
				t.Fatal(err)
			}
			checkAgreement(t, cfg)
		})
	}
}

// checkAgreement compares the per-value files with otel.env and config.json, with agenttrace's
// derivations (agenttrace/internal/resources: RenderFiles, EnvVars).
func checkAgreement(t *testing.T, cfg *Config) {
	t.Helper()
	env, js := cfg.Env, cfg.Resolved
	if js == nil {
		t.Fatal("no config.json")
	}
	eq := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %#v, want %#v", what, got, want)
		}
	}
	eq("service_name vs OTEL_SERVICE_NAME", cfg.ServiceName, env["OTEL_SERVICE_NAME"])
	eq("service_name vs config.json serviceName", cfg.ServiceName, js.ServiceName)
	envAttrs, err := ParseResourceAttributes(env["OTEL_RESOURCE_ATTRIBUTES"])
	if err != nil {
		t.Fatalf("OTEL_RESOURCE_ATTRIBUTES: %v", err)
	}
	eq("resource_attributes vs OTEL_RESOURCE_ATTRIBUTES", cfg.ResourceAttributes, envAttrs)
	eq("resource_attributes vs config.json", cfg.ResourceAttributes, js.ResourceAttributes)
	eq("service_name vs resource attribute service.name", cfg.ServiceName, cfg.ResourceAttributes["service.name"])

	// Exporters: traces_exporter is OTEL_TRACES_EXPORTER, the non-jaeger exporters of config.json.
	exporters := "none"
	if len(cfg.TracesExporters) > 0 {
		exporters = strings.Join(cfg.TracesExporters, ",")
	}
	eq("traces_exporter vs OTEL_TRACES_EXPORTER", exporters, env["OTEL_TRACES_EXPORTER"])
	var sdkExporters []string
	var otlp, zipkin *Exporter
	for i, e := range js.Exporters {
		switch e.Type {
		case "jaeger":
			if e.Deprecated == "" {
				t.Error("config.json: a jaeger exporter not marked deprecated")
			}
			continue
		case "otlp":
			if otlp == nil {
				otlp = &js.Exporters[i]
			}
		case "zipkin":
			zipkin = &js.Exporters[i]
		}
		sdkExporters = append(sdkExporters, e.Type)
	}
	eq("traces_exporter vs config.json exporters", cfg.TracesExporters, sdkExporters)

	// The OTLP files describe the first otlp exporter.
	if otlp == nil {
		eq("otel_endpoint without an otlp exporter", cfg.Endpoint, "")
		eq("otel_protocol without an otlp exporter", cfg.Protocol, "")
		_, set := env["OTEL_EXPORTER_OTLP_ENDPOINT"]
		eq("OTEL_EXPORTER_OTLP_ENDPOINT set without an otlp exporter", set, false)
	} else {
		eq("otel_endpoint vs config.json", cfg.Endpoint, otlp.Endpoint)
		eq("OTEL_EXPORTER_OTLP_ENDPOINT vs config.json url", env["OTEL_EXPORTER_OTLP_ENDPOINT"], otlp.URL)
		eq("otel_protocol vs OTEL_EXPORTER_OTLP_PROTOCOL", cfg.Protocol, env["OTEL_EXPORTER_OTLP_PROTOCOL"])
		eq("otel_protocol vs config.json", cfg.Protocol, otlp.Protocol)
		eq("otel_compression vs OTEL_EXPORTER_OTLP_COMPRESSION", cfg.Compression, env["OTEL_EXPORTER_OTLP_COMPRESSION"])
		eq("otel_compression vs config.json", cfg.Compression, otlp.Compression)
		eq("otel_insecure vs OTEL_EXPORTER_OTLP_INSECURE", strconv.FormatBool(cfg.Insecure), env["OTEL_EXPORTER_OTLP_INSECURE"])
		eq("otel_insecure vs config.json", cfg.Insecure, otlp.Insecure)
	}
	if zipkin == nil {
		eq("zipkin_endpoint without a zipkin exporter", cfg.ZipkinEndpoint, "")
	} else {
		eq("zipkin_endpoint vs config.json url", cfg.ZipkinEndpoint, zipkin.URL)
	}
	eq("zipkin_endpoint vs OTEL_EXPORTER_ZIPKIN_ENDPOINT", cfg.ZipkinEndpoint, env["OTEL_EXPORTER_ZIPKIN_ENDPOINT"])

	// Sampling.
	eq("sampler vs OTEL_TRACES_SAMPLER", cfg.Sampler, env["OTEL_TRACES_SAMPLER"])
	eq("sampler vs config.json", cfg.Sampler, js.Sampling.Sampler)
	eq("sampler_arg vs OTEL_TRACES_SAMPLER_ARG", cfg.SamplerArg, ratio(t, env["OTEL_TRACES_SAMPLER_ARG"]))
	eq("sampler_arg vs config.json rate", cfg.SamplerArg, ratio(t, js.Sampling.Rate))

	// GenAI: otel.env has one capture switch, on when prompts or completions are captured.
	eq("genai_* vs config.json", cfg.GenAI, js.GenAI)
	if !cfg.GenAI.Enabled && cfg.GenAI != (GenAI{}) {
		t.Errorf("genai capture flags %+v while genai_enabled is false", cfg.GenAI)
	}
	capture := cfg.GenAI.Enabled && (cfg.GenAI.CapturePrompts || cfg.GenAI.CaptureCompletions)
	eq("genai_capture_* vs OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
		strconv.FormatBool(capture), env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"])

	// Integrations.
	eq("mlflow_* vs config.json", cfg.MLflow, js.Integration.MLflow)
	if uri, set := env["MLFLOW_TRACKING_URI"]; cfg.MLflow == nil {
		eq("MLFLOW_TRACKING_URI set without mlflow_tracking_uri", set, false)
	} else {
		eq("mlflow_tracking_uri vs MLFLOW_TRACKING_URI", cfg.MLflow.TrackingURI, uri)
		eq("mlflow_experiment_name vs MLFLOW_EXPERIMENT_NAME", cfg.MLflow.ExperimentName, env["MLFLOW_EXPERIMENT_NAME"])
	}
	eq("prometheus_* vs config.json", cfg.Prometheus, js.Integration.Prometheus)
	if port, portSet := env["OTEL_EXPORTER_PROMETHEUS_PORT"]; cfg.Prometheus == nil {
		eq("OTEL_EXPORTER_PROMETHEUS_PORT set without prometheus_port", portSet, false)
	} else {
		eq("prometheus_port vs OTEL_EXPORTER_PROMETHEUS_PORT", strconv.Itoa(cfg.Prometheus.Port), port)
		eq("OTEL_METRICS_EXPORTER with prometheus", env["OTEL_METRICS_EXPORTER"], "prometheus")
	}
}

// ratio parses s as sampler_arg is parsed; nil when empty.
func ratio(t *testing.T, s string) *float64 {
	t.Helper()
	if s == "" {
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("ratio %q: %v", s, err)
	}
	return &f
}

// The goldens cover what the agreement check compares: without these the test above could pass
// over files that are never rendered.
func TestAgentTraceGoldensCoverEveryFile(t *testing.T) {
	seen := map[string]bool{}
	for _, data := range goldenConfigMaps(t) {
		for k := range data {
			seen[k] = true
		}
	}
	for _, f := range Files {
		if !seen[f] {
			t.Errorf("no agenttrace golden renders %s", f)
		}
	}
}

// A malformed file is an error that names it; config.json with a field Resolved lacks is one.
func TestLoadRejectsMalformedFiles(t *testing.T) {
	seed := goldenConfigMaps(t)["seed.golden.yaml"]
	if seed == nil {
		t.Fatal("no seed.golden.yaml")
	}
	for _, c := range []struct{ file, content string }{
		{FileGenAIEnabled, "yes"},
		{FileGenAICapturePrompts, "1"},
		{FileGenAICaptureCompletions, ""},
		{FileGenAICaptureModelParameters, "True"},
		{FileInsecure, "maybe"},
		{FilePrometheusPort, "http"},
		{FilePrometheusPort, "70000"},
		{FileSamplerArg, "ten percent"},
		{FileSamplerArg, "1.5"},
		{FileResourceAttributes, "service.name=a,env"},
		{FileResourceAttributes, "=a"},
		{FileResourceAttributes, "a=1,a=2"},
		{FileResourceAttributes, "a=%zz"},
		{FileTracesExporter, "otlp,,zipkin"},
		{FileJSON, strings.Replace(seed[FileJSON], `"serviceName"`, `"serviceNames"`, 1)},
		{FileJSON, strings.Replace(seed[FileJSON], `"insecure": false`, `"insecure": false, "headers": {}`, 1)},
		{FileJSON, seed[FileJSON] + "{}"},
		{FileEnv, "OTEL_SERVICE_NAME\n"},
	} {
		data := maps.Clone(seed)
		data[c.file] = c.content
		_, err := Load(writeFiles(t, data))
		if err == nil || !strings.Contains(err.Error(), c.file) {
			t.Errorf("%s = %.40q: want an error naming the file, got %v", c.file, c.content, err)
		}
	}
}

func TestParseResourceAttributes(t *testing.T) {
	got, err := ParseResourceAttributes("a=x%2Cy%3Dz%25,b=,c=two%20words:/@")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "x,y=z%", "b": "", "c": "two words:/@"}
	if !maps.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
