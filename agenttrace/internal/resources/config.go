// Package resources renders an AgentTrace into the ConfigMap its workload's agent code reads. Every
// function here is pure: no client, no clock, same input → same bytes.
package resources

import (
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/pkg/duck"
)

// Config is the fully resolved telemetry configuration: the AgentTrace spec with every default
// applied. It is written verbatim as config.json and every other file is derived from it.
type Config struct {
	Workload           Workload          `json:"workload"`
	ServiceName        string            `json:"serviceName"`
	Exporters          []Exporter        `json:"exporters"`
	Sampling           Sampling          `json:"sampling"`
	GenAI              GenAI             `json:"genai"`
	ResourceAttributes map[string]string `json:"resourceAttributes"`
	Integration        Integration       `json:"integration"`
}

// Workload identifies the configured workload.
type Workload struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
}

// Exporter is one exporter with its defaults applied. URL is the endpoint as an OpenTelemetry SDK
// expects it (scheme included; for otlp over HTTP the base URL without /v1/traces).
type Exporter struct {
	Type        string `json:"type"`
	Endpoint    string `json:"endpoint,omitempty"`
	URL         string `json:"url,omitempty"`
	Protocol    string `json:"protocol,omitempty"`
	Compression string `json:"compression,omitempty"`
	Insecure    bool   `json:"insecure"`
	// Deprecated says why the exporter is not in every SDK format: jaeger is kept in config.json
	// only; zipkin is left out of otel-config.yaml (see the messages).
	Deprecated string `json:"deprecated,omitempty"`
}

// Sampling is the sampler in the OpenTelemetry environment-variable vocabulary.
type Sampling struct {
	Type string `json:"type"`
	// Sampler is the OTEL_TRACES_SAMPLER value (always_on, always_off, traceidratio,
	// parentbased_traceidratio, parentbased_always_on).
	Sampler string `json:"sampler"`
	// Rate is the OTEL_TRACES_SAMPLER_ARG of the ratio samplers, as written in the spec.
	Rate string `json:"rate,omitempty"`
}

// GenAI is spec.genai with defaults (everything off).
type GenAI struct {
	Enabled                bool `json:"enabled"`
	CapturePrompts         bool `json:"capturePrompts"`
	CaptureCompletions     bool `json:"captureCompletions"`
	CaptureModelParameters bool `json:"captureModelParameters"`
}

// Integration is spec.integration; disabled integrations are omitted.
type Integration struct {
	MLflow     *MLflow     `json:"mlflow,omitempty"`
	Prometheus *Prometheus `json:"prometheus,omitempty"`
}

type MLflow struct {
	TrackingURI    string `json:"trackingUri"`
	ExperimentName string `json:"experimentName,omitempty"`
}

type Prometheus struct {
	Port int32  `json:"port"`
	Path string `json:"path"`
}

// Defaults for fields the spec leaves out.
const (
	DefaultProtocol       = "grpc"
	DefaultCompression    = "none"
	DefaultSampler        = "parentbased_always_on"
	DefaultPrometheusPort = 9464
	DefaultPrometheusPath = "/metrics"
	// ServiceNameAttribute is the resource attribute that names the service.
	ServiceNameAttribute = "service.name"
)

// ResolveConfig applies every default to the AgentTrace's spec for the given workload.
func ResolveConfig(cr *v1alpha1.AgentTrace, w *duck.Workload) Config {
	spec := cr.Spec
	gvk := w.GroupVersionKind()
	cfg := Config{
		Workload: Workload{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
			Namespace: w.Namespace(), Name: w.Name()},
		ResourceAttributes: map[string]string{},
		Exporters:          []Exporter{},
	}
	for k, v := range spec.ResourceAttributes {
		cfg.ResourceAttributes[k] = string(v)
	}
	if cfg.ResourceAttributes[ServiceNameAttribute] == "" {
		cfg.ResourceAttributes[ServiceNameAttribute] = w.Name()
	}
	cfg.ServiceName = cfg.ResourceAttributes[ServiceNameAttribute]

	for _, e := range spec.Exporters {
		cfg.Exporters = append(cfg.Exporters, resolveExporter(e))
	}
	cfg.Sampling = resolveSampling(spec.Sampling)
	if g := spec.GenAI; g != nil && g.Enabled {
		cfg.GenAI = GenAI{Enabled: true, CapturePrompts: g.CapturePrompts,
			CaptureCompletions: g.CaptureCompletions, CaptureModelParameters: g.CaptureModelParameters}
	}
	if in := spec.Integration; in != nil {
		if m := in.MLflow; m != nil && m.Enabled {
			cfg.Integration.MLflow = &MLflow{TrackingURI: m.TrackingURI, ExperimentName: m.ExperimentName}
		}
		if p := in.Prometheus; p != nil && p.Enabled {
			prom := &Prometheus{Port: p.Port, Path: p.Path}
			if prom.Port == 0 {
				prom.Port = DefaultPrometheusPort
			}
			if prom.Path == "" {
				prom.Path = DefaultPrometheusPath
			}
			cfg.Integration.Prometheus = prom
		}
	}
	return cfg
}

func resolveExporter(e v1alpha1.Exporter) Exporter {
	out := Exporter{Type: string(e.Type), Endpoint: e.Endpoint, Insecure: e.Insecure}
	switch e.Type {
	case v1alpha1.ExporterOTLP:
		out.Protocol, out.Compression = string(e.Protocol), string(e.Compression)
		if out.Protocol == "" {
			out.Protocol = DefaultProtocol
		}
		if out.Compression == "" {
			out.Compression = DefaultCompression
		}
		out.URL = endpointURL(e.Endpoint, e.Insecure, "")
	case v1alpha1.ExporterZipkin:
		out.URL = endpointURL(e.Endpoint, e.Insecure, "/api/v2/spans")
		out.Deprecated = DeprecatedZipkinMessage
	case v1alpha1.ExporterJaeger:
		out.Deprecated = DeprecatedJaegerMessage
	}
	if out.URL != "" {
		// The URL's scheme decides: an http:// endpoint is plaintext whatever spec.insecure says, and
		// every reader (OTEL_EXPORTER_OTLP_INSECURE, otel_insecure, config.json) must say so. The Go
		// SDK's HTTP exporter speaks TLS to an http:// URL when told OTEL_EXPORTER_OTLP_INSECURE=false.
		out.Insecure = strings.HasPrefix(out.URL, "http://")
	}
	return out
}

// DeprecatedJaegerMessage explains why a jaeger exporter does not reach the SDK configuration.
const DeprecatedJaegerMessage = "the jaeger exporter is deprecated: OpenTelemetry SDKs removed the Jaeger protocol, " +
	"so it is kept in config.json only; add an otlp exporter pointing at Jaeger's OTLP port (4317 gRPC, 4318 HTTP) instead"

// DeprecatedZipkinMessage explains why a zipkin exporter is missing from otel-config.yaml.
const DeprecatedZipkinMessage = "the zipkin exporter is deprecated: the OpenTelemetry declarative configuration (file_format 1.0) " +
	"has no zipkin exporter, so otel-config.yaml leaves it out; otel.env and zipkin_endpoint keep it for SDKs that still ship one " +
	"(OTEL_TRACES_EXPORTER=zipkin); send spans over otlp to a collector that forwards them to Zipkin instead"

// Deprecations returns the deprecation message of every configured exporter that has one, in
// spec order.
func (c Config) Deprecations() []string {
	var out []string
	for _, e := range c.Exporters {
		if e.Deprecated != "" {
			out = append(out, e.Deprecated)
		}
	}
	return out
}

// endpointURL turns host:port into a URL (http when insecure, else https) and appends path to a
// host:port or to a URL without a path. URLs given with a scheme keep it.
func endpointURL(endpoint string, insecure bool, path string) string {
	if !strings.Contains(endpoint, "://") {
		scheme := "https"
		if insecure {
			scheme = "http"
		}
		return scheme + "://" + endpoint + path
	}
	if u, err := url.Parse(endpoint); err == nil && (u.Path == "" || u.Path == "/") && path != "" {
		u.Path = path
		return u.String()
	}
	return endpoint
}

func resolveSampling(s *v1alpha1.Sampling) Sampling {
	if s == nil {
		return Sampling{Type: "default", Sampler: DefaultSampler}
	}
	out := Sampling{Type: string(s.Type)}
	switch s.Type {
	case v1alpha1.SamplingAlwaysOn:
		out.Sampler = "always_on"
	case v1alpha1.SamplingAlwaysOff:
		out.Sampler = "always_off"
	case v1alpha1.SamplingProbabilistic:
		out.Sampler, out.Rate = "traceidratio", formatRate(s.Rate)
	case v1alpha1.SamplingParentBasedProbabilistic:
		out.Sampler, out.Rate = "parentbased_traceidratio", formatRate(s.Rate)
	default:
		out.Sampler = DefaultSampler
	}
	return out
}

// formatRate normalises the spec's number (0.10 → 0.1, 1 → 1).
func formatRate(r v1alpha1.Rate) string {
	return strconv.FormatFloat(r.Float64(), 'f', -1, 64)
}

// FirstOTLP returns the first OTLP exporter, the one the single-endpoint files describe.
func (c Config) FirstOTLP() (Exporter, bool) {
	for _, e := range c.Exporters {
		if e.Type == string(v1alpha1.ExporterOTLP) {
			return e, true
		}
	}
	return Exporter{}, false
}

// exporter returns the exporter of the given type.
func (c Config) exporter(t v1alpha1.ExporterType) (Exporter, bool) {
	for _, e := range c.Exporters {
		if e.Type == string(t) {
			return e, true
		}
	}
	return Exporter{}, false
}

// TracesExporters is the OTEL_TRACES_EXPORTER value: the SDK-supported exporters in spec order,
// or "none" when only jaeger is configured.
func (c Config) TracesExporters() string {
	var names []string
	for _, e := range c.Exporters {
		if e.Type != string(v1alpha1.ExporterJaeger) {
			names = append(names, e.Type)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// ResourceAttributesString is the OTEL_RESOURCE_ATTRIBUTES value: k=v pairs sorted by key,
// values percent-encoded as the OpenTelemetry specification requires.
func (c Config) ResourceAttributesString() string {
	keys := make([]string, 0, len(c.ResourceAttributes))
	for k := range c.ResourceAttributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([]string, 0, len(keys))
	for _, k := range keys {
		pairs = append(pairs, k+"="+percentEncode(c.ResourceAttributes[k]))
	}
	return strings.Join(pairs, ",")
}

// percentEncode escapes every byte outside a conservative safe set, so ',' '=' '%' and spaces in
// values survive the k=v,k=v format.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("-._~:/@", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
