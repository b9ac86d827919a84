package resources

import (
	"strconv"
	"strings"
)

// Environment variables of the OpenTelemetry SDK configuration specification
// (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/) and of the
// GenAI instrumentations.
const (
	EnvServiceName        = "OTEL_SERVICE_NAME"
	EnvResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES"
	EnvTracesExporter     = "OTEL_TRACES_EXPORTER"
	EnvOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvOTLPProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvOTLPCompression    = "OTEL_EXPORTER_OTLP_COMPRESSION"
	EnvOTLPInsecure       = "OTEL_EXPORTER_OTLP_INSECURE"
	EnvZipkinEndpoint     = "OTEL_EXPORTER_ZIPKIN_ENDPOINT"
	EnvTracesSampler      = "OTEL_TRACES_SAMPLER"
	EnvTracesSamplerArg   = "OTEL_TRACES_SAMPLER_ARG"
	EnvMetricsExporter    = "OTEL_METRICS_EXPORTER"
	EnvPrometheusHost     = "OTEL_EXPORTER_PROMETHEUS_HOST"
	EnvPrometheusPort     = "OTEL_EXPORTER_PROMETHEUS_PORT"
	// EnvGenAICaptureContent is read by the OpenTelemetry GenAI instrumentations
	// (opentelemetry-python-contrib instrumentation-genai/*, util-genai) to record prompt and
	// completion content; its boolean form applies while OTEL_SEMCONV_STABILITY_OPT_IN does not
	// select gen_ai_latest_experimental.
	EnvGenAICaptureContent = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
	EnvMLflowTrackingURI   = "MLFLOW_TRACKING_URI"
	EnvMLflowExperiment    = "MLFLOW_EXPERIMENT_NAME"
)

// EnvVars returns the OTEL_* (and MLFLOW_*) variables for cfg, in a fixed order.
func EnvVars(cfg Config) [][2]string {
	vars := [][2]string{
		{EnvServiceName, cfg.ServiceName},
		{EnvResourceAttributes, cfg.ResourceAttributesString()},
		{EnvTracesExporter, cfg.TracesExporters()},
	}
	if otlp, ok := cfg.FirstOTLP(); ok {
		vars = append(vars,
			[2]string{EnvOTLPEndpoint, otlp.URL},
			[2]string{EnvOTLPProtocol, otlp.Protocol},
			[2]string{EnvOTLPCompression, otlp.Compression},
			[2]string{EnvOTLPInsecure, strconv.FormatBool(otlp.Insecure)})
	}
	if z, ok := cfg.exporter("zipkin"); ok {
		vars = append(vars, [2]string{EnvZipkinEndpoint, z.URL})
	}
	vars = append(vars, [2]string{EnvTracesSampler, cfg.Sampling.Sampler})
	if cfg.Sampling.Rate != "" {
		vars = append(vars, [2]string{EnvTracesSamplerArg, cfg.Sampling.Rate})
	}
	capture := cfg.GenAI.Enabled && (cfg.GenAI.CapturePrompts || cfg.GenAI.CaptureCompletions)
	vars = append(vars, [2]string{EnvGenAICaptureContent, strconv.FormatBool(capture)})
	if p := cfg.Integration.Prometheus; p != nil {
		vars = append(vars,
			[2]string{EnvMetricsExporter, "prometheus"},
			[2]string{EnvPrometheusHost, "0.0.0.0"},
			[2]string{EnvPrometheusPort, strconv.Itoa(int(p.Port))})
	}
	if m := cfg.Integration.MLflow; m != nil {
		vars = append(vars, [2]string{EnvMLflowTrackingURI, m.TrackingURI})
		if m.ExperimentName != "" {
			vars = append(vars, [2]string{EnvMLflowExperiment, m.ExperimentName})
		}
	}
	return vars
}

// RenderEnv writes EnvVars as KEY=value lines that a POSIX shell (`set -a; . otel.env`), a dotenv
// loader or a ten-line parser can read: values with characters outside a safe set are single-quoted.
func RenderEnv(cfg Config) string {
	var b strings.Builder
	b.WriteString("# OpenTelemetry SDK environment, rendered by kagenti-agenttrace. Do not edit.\n")
	for _, kv := range EnvVars(cfg) {
		b.WriteString(kv[0])
		b.WriteByte('=')
		b.WriteString(shellQuote(kv[1]))
		b.WriteByte('\n')
	}
	return b.String()
}

func shellQuote(v string) string {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("-._~:/@,=%+", c) >= 0) {
			return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
		}
	}
	return v
}
