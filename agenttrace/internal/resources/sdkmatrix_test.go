package resources

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
)

// SDKConfigMatrixGolden holds otel-config.yaml for every exporter/sampler combination the API
// allows. examples/agent-telemetry (its own module, outside go.work) builds an SDK from each entry
// with the OpenTelemetry Go SDK's parsers, go.opentelemetry.io/contrib/otelconf and otelconf/x:
// otelconf raises shared requirements of the workspace (k8s.io/kube-openapi, gRPC, …) above the
// pillars' pins, so it stays out of this module. This test keeps the file equal to the rendering.
const SDKConfigMatrixGolden = "testdata/sdkconfig/matrix.golden.yaml"

// SDKConfigMatrix is the golden file's content.
type SDKConfigMatrix struct {
	// ServiceName and ResourceAttributes are what every file's resource must carry.
	ServiceName        string            `json:"serviceName"`
	ResourceAttributes map[string]string `json:"resourceAttributes"`
	Files              []SDKConfigCase   `json:"files"`
}

// SDKConfigCase is one rendered otel-config.yaml and what an SDK built from it must do.
type SDKConfigCase struct {
	Name string `json:"name"`
	// Sampler is spec.sampling.type, "default" when omitted; Rate its rate.
	Sampler string `json:"sampler"`
	Rate    string `json:"rate,omitempty"`
	// Prometheus: the file has the prometheus/development pull reader.
	Prometheus bool   `json:"prometheus"`
	File       string `json:"file"`
}

var matrixAttributes = map[string]string{"service.version": "2.1.0", "deployment.environment": "prod, eu=1 #x"}

// matrixExporter is one exporter of each type.
func matrixExporter(t v1alpha1.ExporterType) v1alpha1.Exporter {
	switch t {
	case v1alpha1.ExporterOTLP:
		return v1alpha1.Exporter{Type: t, Endpoint: "otel-collector.observability:4317", Insecure: true}
	case v1alpha1.ExporterJaeger:
		return v1alpha1.Exporter{Type: t, Endpoint: "jaeger-collector.observability:14250"}
	case v1alpha1.ExporterZipkin:
		return v1alpha1.Exporter{Type: t, Endpoint: "zipkin.observability:9411"}
	}
	return v1alpha1.Exporter{Type: t}
}

// matrixSpecs: every non-empty set of exporter types × every sampler × prometheus on and off,
// then every shape of an otlp exporter (protocol × compression × insecure × host:port, IPv6 or URL).
func matrixSpecs() map[string]v1alpha1.AgentTraceSpec {
	types := []v1alpha1.ExporterType{v1alpha1.ExporterOTLP, v1alpha1.ExporterJaeger, v1alpha1.ExporterZipkin, v1alpha1.ExporterConsole}
	samplings := []*v1alpha1.Sampling{nil,
		{Type: v1alpha1.SamplingAlwaysOn},
		{Type: v1alpha1.SamplingAlwaysOff},
		{Type: v1alpha1.SamplingProbabilistic, Rate: "0.25"},
		{Type: v1alpha1.SamplingParentBasedProbabilistic, Rate: "0"},
	}
	out := map[string]v1alpha1.AgentTraceSpec{}
	for set := 1; set < 1<<len(types); set++ {
		var exporters []v1alpha1.Exporter
		var names []string
		for i, et := range types {
			if set&(1<<i) != 0 {
				exporters = append(exporters, matrixExporter(et))
				names = append(names, string(et))
			}
		}
		for _, s := range samplings {
			for _, prometheus := range []bool{false, true} {
				spec := v1alpha1.AgentTraceSpec{Exporters: exporters, Sampling: s}
				if prometheus {
					spec.Integration = &v1alpha1.Integration{Prometheus: &v1alpha1.Prometheus{Enabled: true, Port: 9464, Path: "/metrics"}}
				}
				out[fmt.Sprintf("%s %s prometheus=%v", strings.Join(names, "+"), samplerOf(s), prometheus)] = spec
			}
		}
	}
	for _, p := range []v1alpha1.Protocol{v1alpha1.ProtocolGRPC, v1alpha1.ProtocolHTTPProtobuf} {
		for _, c := range []v1alpha1.Compression{v1alpha1.CompressionGzip, v1alpha1.CompressionNone} {
			for _, insecure := range []bool{false, true} {
				for _, endpoint := range []string{"otel-collector.observability:4317", "[fd00::1]:4317", "https://otel.example.com:4318"} {
					e := v1alpha1.Exporter{Type: v1alpha1.ExporterOTLP, Endpoint: endpoint, Protocol: p, Compression: c, Insecure: insecure}
					out[fmt.Sprintf("otlp %s %s insecure=%v %s", p, c, insecure, endpoint)] = v1alpha1.AgentTraceSpec{Exporters: []v1alpha1.Exporter{e}}
				}
			}
		}
	}
	return out
}

func samplerOf(s *v1alpha1.Sampling) string {
	if s == nil {
		return "default"
	}
	return string(s.Type)
}

func renderMatrix(t *testing.T) SDKConfigMatrix {
	t.Helper()
	m := SDKConfigMatrix{ServiceName: "weather-agent", ResourceAttributes: matrixAttributes}
	specs := matrixSpecs()
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		spec := specs[name]
		spec.TargetRef = v1alpha1TargetRef("Deployment", "weather-agent")
		spec.ResourceAttributes = map[string]v1alpha1.ResourceAttributeValue{}
		for k, v := range matrixAttributes {
			spec.ResourceAttributes[k] = v1alpha1.ResourceAttributeValue(v)
		}
		cr := &v1alpha1.AgentTrace{Spec: spec}
		cr.Name, cr.Namespace = "trace", "agents"
		cm, err := MakeConfigMap(cr, workloadFor(t, cr))
		require.NoError(t, err)
		c := SDKConfigCase{Name: name, Sampler: samplerOf(spec.Sampling), Prometheus: spec.Integration != nil, File: cm.Data[KeyOTelConfigYAML]}
		if spec.Sampling != nil {
			c.Rate = string(spec.Sampling.Rate)
		}
		m.Files = append(m.Files, c)
	}
	return m
}

// TestSDKConfigMatrixGolden keeps SDKConfigMatrixGolden current (UPDATE_GOLDEN=1 rewrites it) and
// checks what does not need an SDK: no file names a zipkin exporter (file_format 1.0 has none, and
// otelconf refuses a whole file for it).
func TestSDKConfigMatrixGolden(t *testing.T) {
	m := renderMatrix(t)
	for _, c := range m.Files {
		assert.NotContains(t, c.File, "zipkin", c.Name)
	}
	got, err := yaml.Marshal(m)
	require.NoError(t, err)
	got = append([]byte("# Generated by TestSDKConfigMatrixGolden (UPDATE_GOLDEN=1); read by examples/agent-telemetry's tests.\n"), got...)
	if updateGolden {
		require.NoError(t, os.MkdirAll("testdata/sdkconfig", 0o755))
		require.NoError(t, os.WriteFile(SDKConfigMatrixGolden, got, 0o644))
		return
	}
	want, err := os.ReadFile(SDKConfigMatrixGolden)
	require.NoError(t, err, "missing golden file; run with UPDATE_GOLDEN=1")
	require.Equal(t, string(want), string(got), "%s is stale; rerun with UPDATE_GOLDEN=1 and review the diff", SDKConfigMatrixGolden)
}
