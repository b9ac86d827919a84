package resources

import (
	"bytes"
	"sort"
	"strconv"

	yaml "go.yaml.in/yaml/v3"
)

// SDKConfigFileFormat is the file_format of the rendered OpenTelemetry declarative configuration
// (schema of github.com/open-telemetry/opentelemetry-configuration, major version 1).
const SDKConfigFileFormat = "1.0"

// The types below are the subset of the opentelemetry-configuration schema this controller emits,
// in the schema's own field names. Empty structs render as {} (e.g. `always_on: {}`).
type sdkConfig struct {
	FileFormat     string          `yaml:"file_format"`
	Resource       sdkResource     `yaml:"resource"`
	Propagator     sdkPropagator   `yaml:"propagator"`
	TracerProvider sdkTracer       `yaml:"tracer_provider"`
	MeterProvider  *sdkMeterConfig `yaml:"meter_provider,omitempty"`
}

type sdkResource struct {
	Attributes []sdkAttribute `yaml:"attributes"`
}

type sdkAttribute struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

type sdkPropagator struct {
	Composite []map[string]struct{} `yaml:"composite"`
}

type sdkTracer struct {
	Processors []sdkProcessor `yaml:"processors,omitempty"`
	Sampler    sdkSampler     `yaml:"sampler"`
}

type sdkProcessor struct {
	Batch  *sdkExporterHolder `yaml:"batch,omitempty"`
	Simple *sdkExporterHolder `yaml:"simple,omitempty"`
}

type sdkExporterHolder struct {
	Exporter sdkExporter `yaml:"exporter"`
}

type sdkExporter struct {
	OTLPGRPC *sdkOTLP  `yaml:"otlp_grpc,omitempty"`
	OTLPHTTP *sdkOTLP  `yaml:"otlp_http,omitempty"`
	Console  *struct{} `yaml:"console,omitempty"`
}

type sdkOTLP struct {
	Endpoint    string  `yaml:"endpoint"`
	Compression string  `yaml:"compression"`
	TLS         *sdkTLS `yaml:"tls,omitempty"`
}

type sdkTLS struct {
	Insecure bool `yaml:"insecure"`
}

type sdkSampler struct {
	AlwaysOn          *struct{}       `yaml:"always_on,omitempty"`
	AlwaysOff         *struct{}       `yaml:"always_off,omitempty"`
	TraceIDRatioBased *sdkRatio       `yaml:"trace_id_ratio_based,omitempty"`
	ParentBased       *sdkParentBased `yaml:"parent_based,omitempty"`
}

type sdkRatio struct {
	Ratio float64 `yaml:"ratio"`
}

type sdkParentBased struct {
	Root sdkSampler `yaml:"root"`
}

type sdkMeterConfig struct {
	Readers []sdkReader `yaml:"readers"`
}

type sdkReader struct {
	Pull sdkPull `yaml:"pull"`
}

type sdkPull struct {
	Exporter sdkPullExporter `yaml:"exporter"`
}

type sdkPullExporter struct {
	Prometheus sdkPrometheus `yaml:"prometheus/development"`
}

type sdkPrometheus struct {
	Host string `yaml:"host"`
	Port int32  `yaml:"port"`
}

// RenderSDKConfig returns cfg as an OpenTelemetry SDK declarative configuration file (what
// OTEL_CONFIG_FILE points at). Only OTLP and console exporters appear: the SDKs have no Jaeger
// exporter any more, and file_format 1.0 removed zipkin. The Prometheus reader is the schema's
// experimental prometheus/development exporter, which only the SDKs' experimental parsers build
// (Go: go.opentelemetry.io/contrib/otelconf/x).
func RenderSDKConfig(cfg Config) (string, error) {
	doc := sdkConfig{
		FileFormat:     SDKConfigFileFormat,
		Propagator:     sdkPropagator{Composite: []map[string]struct{}{{"tracecontext": {}}, {"baggage": {}}}},
		TracerProvider: sdkTracer{Sampler: sdkSamplerFor(cfg.Sampling)},
	}
	keys := make([]string, 0, len(cfg.ResourceAttributes))
	for k := range cfg.ResourceAttributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		doc.Resource.Attributes = append(doc.Resource.Attributes, sdkAttribute{Name: k, Value: cfg.ResourceAttributes[k]})
	}
	for _, e := range cfg.Exporters {
		switch e.Type {
		case "otlp":
			o := &sdkOTLP{Endpoint: e.URL, Compression: e.Compression}
			if e.Protocol == ProtocolHTTP {
				o.Endpoint = e.URL + "/v1/traces"
				doc.TracerProvider.Processors = append(doc.TracerProvider.Processors,
					sdkProcessor{Batch: &sdkExporterHolder{Exporter: sdkExporter{OTLPHTTP: o}}})
				continue
			}
			o.TLS = &sdkTLS{Insecure: e.Insecure}
			doc.TracerProvider.Processors = append(doc.TracerProvider.Processors,
				sdkProcessor{Batch: &sdkExporterHolder{Exporter: sdkExporter{OTLPGRPC: o}}})
		case "console":
			doc.TracerProvider.Processors = append(doc.TracerProvider.Processors,
				sdkProcessor{Simple: &sdkExporterHolder{Exporter: sdkExporter{Console: &struct{}{}}}})
		}
	}
	if p := cfg.Integration.Prometheus; p != nil {
		doc.MeterProvider = &sdkMeterConfig{Readers: []sdkReader{{Pull: sdkPull{Exporter: sdkPullExporter{
			Prometheus: sdkPrometheus{Host: "0.0.0.0", Port: p.Port}}}}}}
	}
	var buf bytes.Buffer
	buf.WriteString("# OpenTelemetry SDK declarative configuration, rendered by kagenti-agenttrace. Do not edit.\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// ProtocolHTTP is the OTLP/HTTP protocol name in the spec and in OTEL_EXPORTER_OTLP_PROTOCOL.
const ProtocolHTTP = "http/protobuf"

func sdkSamplerFor(s Sampling) sdkSampler {
	ratio := func() *sdkRatio {
		f, _ := strconv.ParseFloat(s.Rate, 64)
		return &sdkRatio{Ratio: f}
	}
	switch s.Sampler {
	case "always_on":
		return sdkSampler{AlwaysOn: &struct{}{}}
	case "always_off":
		return sdkSampler{AlwaysOff: &struct{}{}}
	case "traceidratio":
		return sdkSampler{TraceIDRatioBased: ratio()}
	case "parentbased_traceidratio":
		return sdkSampler{ParentBased: &sdkParentBased{Root: sdkSampler{TraceIDRatioBased: ratio()}}}
	}
	return sdkSampler{ParentBased: &sdkParentBased{Root: sdkSampler{AlwaysOn: &struct{}{}}}}
}
