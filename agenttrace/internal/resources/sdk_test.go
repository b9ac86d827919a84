package resources

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the receiver accepts gzip, as a collector does
	"google.golang.org/protobuf/proto"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
)

// receiver is an in-test OTLP/gRPC trace endpoint on 127.0.0.1.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	got chan *collectortrace.ExportTraceServiceRequest
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.got <- req
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func startReceiver(t *testing.T) (string, *receiver) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rcv := &receiver{got: make(chan *collectortrace.ExportTraceServiceRequest, 16)}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, rcv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), rcv
}

// parseEnv reads otel.env the way the docs tell agent code to: KEY=value lines, '#' comments,
// single-quoted values unquoted.
func parseEnv(t *testing.T, s string) map[string]string {
	t.Helper()
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "malformed line %q", line)
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = strings.ReplaceAll(v[1:len(v)-1], `'\''`, `'`)
		}
		out[k] = v
	}
	return out
}

func renderFor(t *testing.T, spec v1alpha1.AgentTraceSpec) map[string]string {
	t.Helper()
	cr := &v1alpha1.AgentTrace{Spec: spec}
	cr.Name, cr.Namespace = "trace", "agents"
	cm, err := MakeConfigMap(cr, workloadFor(t, cr))
	require.NoError(t, err)
	return cm.Data
}

// TestRenderedEnvDrivesTheOpenTelemetrySDK proves otel.env is real: its variables, and nothing
// else, configure the OpenTelemetry Go SDK's exporter, sampler and resource, and a span reaches an
// OTLP/gRPC receiver with the rendered resource attributes.
func TestRenderedEnvDrivesTheOpenTelemetrySDK(t *testing.T) {
	addr, rcv := startReceiver(t)
	spec := v1alpha1.AgentTraceSpec{
		TargetRef:          v1alpha1TargetRef("Deployment", "weather-agent"),
		Exporters:          []v1alpha1.Exporter{{Type: "otlp", Endpoint: addr, Protocol: "grpc", Compression: "gzip", Insecure: true}, {Type: "jaeger", Endpoint: "jaeger:14250"}},
		Sampling:           &v1alpha1.Sampling{Type: "parent_based_probabilistic", Rate: "1"},
		ResourceAttributes: map[string]v1alpha1.ResourceAttributeValue{"service.version": "2.1.0", "deployment.environment": "prod, eu=1"},
	}
	env := parseEnv(t, renderFor(t, spec)[KeyOTelEnv])
	for k, v := range env {
		t.Setenv(k, v)
	}
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx) // endpoint, insecure, compression: all from the environment
	require.NoError(t, err)
	res, err := resource.New(ctx, resource.WithFromEnv())
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res)) // sampler from OTEL_TRACES_SAMPLER
	t.Cleanup(func() { _ = tp.Shutdown(ctx) })

	_, span := tp.Tracer("test").Start(ctx, "tool_execution")
	assert.True(t, span.SpanContext().IsSampled(), "parentbased_traceidratio with arg 1 samples every root span")
	span.End()

	req := <-rcv.got
	require.Len(t, req.ResourceSpans, 1)
	attrs := map[string]string{}
	for _, kv := range req.ResourceSpans[0].Resource.Attributes {
		attrs[kv.Key] = kv.Value.GetStringValue()
	}
	assert.Equal(t, "weather-agent", attrs["service.name"])
	assert.Equal(t, "2.1.0", attrs["service.version"])
	assert.Equal(t, "prod, eu=1", attrs["deployment.environment"], "percent-encoding round-trips")
	require.Len(t, req.ResourceSpans[0].ScopeSpans, 1)
	assert.Equal(t, "tool_execution", req.ResourceSpans[0].ScopeSpans[0].Spans[0].Name)
}

// The sampler variables select the SDK's sampler: always_off and a zero ratio record nothing.
func TestRenderedSamplerIsTheSDKSampler(t *testing.T) {
	cases := map[string]struct {
		sampling *v1alpha1.Sampling
		sampled  bool
	}{
		"default":                      {nil, true},
		"always_on":                    {&v1alpha1.Sampling{Type: "always_on"}, true},
		"always_off":                   {&v1alpha1.Sampling{Type: "always_off"}, false},
		"probabilistic 0":              {&v1alpha1.Sampling{Type: "probabilistic", Rate: "0"}, false},
		"probabilistic 1":              {&v1alpha1.Sampling{Type: "probabilistic", Rate: "1"}, true},
		"parent_based_probabilistic 0": {&v1alpha1.Sampling{Type: "parent_based_probabilistic", Rate: "0"}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env := parseEnv(t, renderFor(t, v1alpha1.AgentTraceSpec{
				TargetRef: v1alpha1TargetRef("Deployment", "a"),
				Exporters: []v1alpha1.Exporter{{Type: "console"}},
				Sampling:  tc.sampling,
			})[KeyOTelEnv])
			t.Setenv("OTEL_TRACES_SAMPLER", env["OTEL_TRACES_SAMPLER"])
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", env["OTEL_TRACES_SAMPLER_ARG"])
			tp := sdktrace.NewTracerProvider()
			defer func() { _ = tp.Shutdown(context.Background()) }()
			_, span := tp.Tracer("test").Start(context.Background(), "s")
			assert.Equal(t, tc.sampled, span.SpanContext().IsSampled())
			span.End()
		})
	}
}

// The seed's agent example reads only /etc/kagenti/trace/otel_endpoint and passes it, as is, to
// an OTLP gRPC exporter: that must work too.
func TestOTelEndpointFileAsTheSeedExampleUsesIt(t *testing.T) {
	addr, rcv := startReceiver(t)
	data := renderFor(t, v1alpha1.AgentTraceSpec{
		TargetRef: v1alpha1TargetRef("Deployment", "weather-agent"),
		Exporters: []v1alpha1.Exporter{{Type: "otlp", Endpoint: addr}},
	})
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(data[KeyOTelEndpoint]), otlptracegrpc.WithInsecure())
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(ctx) }()
	_, span := tp.Tracer("test").Start(ctx, "tool_execution")
	span.End()
	req := <-rcv.got
	assert.Equal(t, "tool_execution", req.ResourceSpans[0].ScopeSpans[0].Spans[0].Name)
}

// TestRenderedEnvReachesAPlainHTTPEndpoint: an otlp exporter whose endpoint is an http:// URL
// (plaintext by its scheme, insecure unset) is plaintext for the SDK too. The OpenTelemetry Go SDK's
// HTTP exporter, configured from otel.env alone, delivers a span to a plain-HTTP receiver; with
// OTEL_EXPORTER_OTLP_INSECURE=false beside that URL (as rendered before) it spoke TLS to it, and
// nothing arrived (found on kind: TestKindAgentTraceReachesItsCollector).
func TestRenderedEnvReachesAPlainHTTPEndpoint(t *testing.T) {
	got := make(chan *collectortrace.ExportTraceServiceRequest, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "not an OTLP/HTTP export", http.StatusBadRequest)
			return
		}
		got <- req
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()

	data := renderFor(t, v1alpha1.AgentTraceSpec{
		TargetRef: v1alpha1TargetRef("Deployment", "weather-agent"),
		Exporters: []v1alpha1.Exporter{{Type: "otlp", Endpoint: srv.URL, Protocol: "http/protobuf"}},
	})
	env := parseEnv(t, data[KeyOTelEnv])
	for k, v := range env {
		t.Setenv(k, v)
	}
	assert.Equal(t, "true", data[KeyOTelInsecure], "otel_insecure says what the scheme says")
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx) // endpoint and transport security: from the environment
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	_, span := tp.Tracer("test").Start(ctx, "execute_tool")
	span.End()
	require.NoError(t, tp.Shutdown(ctx), "the export over plain HTTP")
	require.Len(t, got, 1)
}
