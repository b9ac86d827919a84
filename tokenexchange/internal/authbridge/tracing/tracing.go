package tracing

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
)

// Instrumentation scopes: which role emitted a span (one process may run several).
const (
	ScopeInbound  = "github.com/kagenti/platform/tokenexchange/authbridge/inbound"
	ScopeOutbound = "github.com/kagenti/platform/tokenexchange/authbridge/outbound"
)

// ComponentAttribute is the resource attribute naming the emitter: the spans carry the
// workload's service.name (they are the workload's, as an Istio sidecar's carry the app's), and
// this says they came from its authbridge, not from the agent's code.
const ComponentAttribute = "kagenti.component"

// Component is ComponentAttribute's value.
const Component = "kagenti-authbridge"

// Propagator reads and writes W3C trace context (traceparent, tracestate).
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Limits bound what one span holds, whatever the proxies put in it: a token's claims are the
// client's to choose (a chain, an audience list), and a span must stay small.
var Limits = sdktrace.SpanLimits{
	AttributeValueLengthLimit:   256,
	AttributeCountLimit:         32,
	EventCountLimit:             8,
	LinkCountLimit:              0,
	AttributePerEventCountLimit: 8,
	AttributePerLinkCountLimit:  0,
}

// ShutdownTimeout bounds the flush and shutdown of a provider that is replaced or stopped.
const ShutdownTimeout = 5 * time.Second

// Tracing holds the process's tracer provider, nil while the trace files configure no export. A
// nil *Tracing is tracing off.
type Tracing struct {
	dir string
	log *zap.Logger

	cur atomic.Pointer[active]

	mu   sync.Mutex // held by Reload
	last *Settings  // the settings cur was built from (nil: off)
}

type active struct {
	tp                *sdktrace.TracerProvider
	inbound, outbound trace.Tracer
}

// New follows the trace files of dir (Watch); nothing is read before Reload or Watch.
func New(dir string, log *zap.Logger) *Tracing {
	return &Tracing{dir: dir, log: log}
}

// ReportErrorsTo sends the OpenTelemetry SDK's errors (a collector that cannot be reached, an
// export refused) to log, each distinct message at most once a minute: the exporter retries every
// batch, and a collector that is down must not flood the sidecar's log.
func ReportErrorsTo(log *zap.Logger) {
	var mu sync.Mutex
	seen := map[string]time.Time{}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		msg := err.Error()
		now := time.Now()
		mu.Lock()
		last, ok := seen[msg]
		if !ok && len(seen) >= 64 {
			clear(seen)
		}
		if !ok || now.Sub(last) >= time.Minute {
			seen[msg] = now
			ok = false
		}
		mu.Unlock()
		if !ok {
			log.Warn("span export", zap.Error(err))
		}
	}))
}

// Inbound returns the inbound role's tracer, nil when tracing is off.
func (t *Tracing) Inbound() trace.Tracer {
	if a := t.current(); a != nil {
		return a.inbound
	}
	return nil
}

// Outbound returns the outbound role's tracer, nil when tracing is off.
func (t *Tracing) Outbound() trace.Tracer {
	if a := t.current(); a != nil {
		return a.outbound
	}
	return nil
}

// On reports whether spans are exported.
func (t *Tracing) On() bool { return t.current() != nil }

// current is the provider and tracers in use; nil when tracing is off (t nil too).
func (t *Tracing) current() *active {
	if t == nil {
		return nil
	}
	return t.cur.Load()
}

// Watch reloads the trace files whenever dir changes (sidecar.WatchDir: fsnotify and every
// poll), until ctx ends; then it flushes and shuts the provider down.
func (t *Tracing) Watch(ctx context.Context, poll time.Duration) {
	t.Reload()
	sidecar.WatchDir(ctx, t.dir, poll, t.log, t.Reload)
	t.switchTo(nil, nil)
}

// Reload reads the trace files and, when they say something new, switches to a provider built
// from them (or to none). Files it cannot use are logged and change nothing.
func (t *Tracing) Reload() {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok, err := Load(t.dir)
	if err != nil {
		t.log.Warn("trace configuration not used; tracing unchanged", zap.Bool("exporting", t.last != nil), zap.Error(err))
		return
	}
	if !ok {
		if t.last != nil {
			t.log.Info("trace configuration removed: spans are no longer exported", zap.String("dir", t.dir))
			t.switchTo(nil, nil)
		}
		return
	}
	if t.last != nil && equal(*t.last, s) {
		return
	}
	tp, err := NewProvider(s)
	if err != nil {
		t.log.Warn("trace configuration not used; tracing unchanged", zap.Bool("exporting", t.last != nil), zap.Error(err))
		return
	}
	t.log.Info("exporting spans", zap.String("endpoint", s.Endpoint), zap.String("protocol", s.Protocol), zap.String("sampler", s.Sampler))
	t.switchTo(tp, &s)
}

// switchTo makes tp current and flushes and shuts down the previous provider, within
// ShutdownTimeout. Called with t.mu held, or once Watch is over.
func (t *Tracing) switchTo(tp *sdktrace.TracerProvider, s *Settings) {
	var next *active
	if tp != nil {
		next = &active{tp: tp, inbound: tp.Tracer(ScopeInbound), outbound: tp.Tracer(ScopeOutbound)}
	}
	t.last = s
	old := t.cur.Swap(next)
	if old == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := old.tp.Shutdown(ctx); err != nil {
		t.log.Warn("previous span exporter not flushed", zap.Error(err))
	}
}

// ForceFlush exports the spans ended so far (tests, and before an exit).
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if a := t.cur.Load(); a != nil {
		return a.tp.ForceFlush(ctx)
	}
	return nil
}

func equal(a, b Settings) bool {
	return maps.Equal(a.ResourceAttributes, b.ResourceAttributes) &&
		a.Endpoint == b.Endpoint && a.Protocol == b.Protocol && a.Compression == b.Compression && a.Insecure == b.Insecure &&
		a.Sampler == b.Sampler && a.SamplerArg == b.SamplerArg && a.ServiceName == b.ServiceName
}

// NewProvider builds a tracer provider exporting to s's endpoint in batches. Creating it opens no
// connection: the exporter connects when it first exports.
func NewProvider(s Settings) (*sdktrace.TracerProvider, error) {
	exp, err := newExporter(s)
	if err != nil {
		return nil, err
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sampler(s)),
		sdktrace.WithResource(newResource(s)),
		sdktrace.WithRawSpanLimits(Limits),
	), nil
}

func newExporter(s Settings) (sdktrace.SpanExporter, error) {
	ctx := context.Background()
	endpoint, isURL := s.Endpoint, strings.Contains(s.Endpoint, "://")
	if s.Protocol == ProtocolHTTP {
		opts := []otlptracehttp.Option{otlptracehttp.WithTimeout(10 * time.Second)}
		if isURL {
			// As OTEL_EXPORTER_OTLP_ENDPOINT: a base URL, to which the signal's path is added.
			u, err := url.Parse(endpoint)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", FileEndpoint, err)
			}
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		} else {
			opts = append(opts, otlptracehttp.WithEndpoint(endpoint))
			if s.Insecure {
				opts = append(opts, otlptracehttp.WithInsecure())
			}
		}
		if s.Compression == "gzip" {
			opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
		} else {
			opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.NoCompression))
		}
		return otlptracehttp.New(ctx, opts...)
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithTimeout(10 * time.Second)}
	if isURL {
		opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
	} else {
		opts = append(opts, otlptracegrpc.WithEndpoint(endpoint))
		if s.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
	}
	if s.Compression == "gzip" {
		opts = append(opts, otlptracegrpc.WithCompressor("gzip"))
	}
	return otlptracegrpc.New(ctx, opts...)
}

func sampler(s Settings) sdktrace.Sampler {
	switch s.Sampler {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(s.SamplerArg)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(s.SamplerArg))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// newResource is the workload's resource (service.name, its resource attributes) and the
// emitter's (ComponentAttribute), over the SDK's own description (telemetry.sdk.*).
func newResource(s Settings) *resource.Resource {
	attrs := make([]attribute.KeyValue, 0, len(s.ResourceAttributes)+2)
	for k, v := range s.ResourceAttributes {
		attrs = append(attrs, attribute.String(k, v))
	}
	if s.ServiceName != "" {
		attrs = append(attrs, attribute.String("service.name", s.ServiceName))
	}
	attrs = append(attrs, attribute.String(ComponentAttribute, Component))
	r, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil { // schema URLs conflict: keep ours
		return resource.NewSchemaless(attrs...)
	}
	return r
}
