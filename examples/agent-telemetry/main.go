// Command agent-telemetry is a tiny agent that takes its OpenTelemetry configuration from the
// files of an AgentTrace (mounted at /etc/kagenti/trace, or $KAGENTI_TRACE_DIR), rebuilds its
// tracer provider whenever kubelet updates them, and exports a span per simulated tool call.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kagenti/platform/examples/agent-telemetry/traceconfig"
)

func main() {
	dir := flag.String("dir", traceconfig.Dir(), "directory of the AgentTrace files")
	poll := flag.Duration("poll", 5*time.Second, "how often to check the files for changes")
	every := flag.Duration("every", 2*time.Second, "how often the agent 'calls a tool'")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var current atomic.Pointer[providerHolder]
	current.Store(&providerHolder{tp: noop.NewTracerProvider()})
	go traceconfig.Watch(ctx, *dir, *poll, func(cfg *traceconfig.Config, err error) {
		if err != nil {
			slog.Error("reading trace configuration; keeping the previous one", "dir", *dir, "err", err)
			return
		}
		next := &providerHolder{tp: noop.NewTracerProvider()}
		if cfg == nil {
			slog.Info("no AgentTrace configuration: tracing off", "dir", *dir)
		} else if tp, err := newProvider(ctx, cfg); err != nil {
			slog.Error("building tracer provider; keeping the previous one", "err", err)
			return
		} else {
			next = &providerHolder{tp: tp, genai: cfg.GenAI, shutdown: tp.Shutdown}
			slog.Info("trace configuration loaded", "version", cfg.Version, "exporters", cfg.TracesExporters,
				"endpoint", cfg.Env["OTEL_EXPORTER_OTLP_ENDPOINT"], "sampler", cfg.Sampler, "genai", cfg.GenAI)
			warnDeprecated(slog.Default(), cfg)
		}
		if old := current.Swap(next); old.shutdown != nil {
			_ = old.shutdown(context.Background()) // flushes spans of the old configuration
		}
	})

	t := time.NewTicker(*every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if h := current.Load(); h.shutdown != nil {
				_ = h.shutdown(context.Background())
			}
			return
		case <-t.C:
			h := current.Load()
			callTool(ctx, h.tp.Tracer("agent-telemetry"), h.genai)
		}
	}
}

type providerHolder struct {
	tp       trace.TracerProvider
	genai    traceconfig.GenAI
	shutdown func(context.Context) error
}

// The simulated tool call: what the model was asked, what it answered, with which parameters.
const (
	toolName      = "get_weather"
	model         = "granite-3.3-8b-instruct"
	inputMessages = `[{"role":"user","parts":[{"type":"text","content":"Weather in Paris?"}]}]`
	outputMessage = `[{"role":"assistant","parts":[{"type":"text","content":"Rainy, 14 °C."}],"finish_reason":"stop"}]`
)

// callTool is the agent's simulated tool call: one execute_tool span named by the OpenTelemetry
// GenAI semantic conventions. Message content, which may hold personal data, is recorded only when
// the AgentTrace captures it (genai_capture_prompts, genai_capture_completions), and the request's
// model parameters only with genai_capture_model_parameters.
func callTool(ctx context.Context, tracer trace.Tracer, g traceconfig.GenAI) {
	_, span := tracer.Start(ctx, "execute_tool "+toolName, trace.WithAttributes(
		semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(toolName)))
	defer span.End()
	if g.Enabled && g.CapturePrompts {
		span.SetAttributes(semconv.GenAIInputMessagesKey.String(inputMessages))
	}
	if g.Enabled && g.CaptureModelParameters {
		span.SetAttributes(semconv.GenAIRequestModel(model), semconv.GenAIRequestTemperature(0.2),
			semconv.GenAIRequestMaxTokens(256))
	}
	time.Sleep(10 * time.Millisecond) // the "tool"
	if g.Enabled && g.CaptureCompletions {
		span.SetAttributes(semconv.GenAIOutputMessagesKey.String(outputMessage))
	}
}

// warnDeprecated logs each exporter config.json marks deprecated: the AgentTrace asks for an
// exporter this agent's SDK does not have (jaeger), or has only through otel.env (zipkin).
func warnDeprecated(log *slog.Logger, cfg *traceconfig.Config) {
	if cfg.Resolved == nil {
		return
	}
	for _, e := range cfg.Resolved.Exporters {
		if e.Deprecated != "" {
			log.Warn("deprecated exporter in the AgentTrace", "type", e.Type, "endpoint", e.Endpoint, "why", e.Deprecated)
		}
	}
}

// newProvider applies otel.env to the process environment, which is where the OpenTelemetry SDK
// reads exporter, sampler and resource settings from, and builds a provider from it.
func newProvider(ctx context.Context, cfg *traceconfig.Config) (*sdktrace.TracerProvider, error) {
	for k, v := range cfg.Env {
		if err := os.Setenv(k, v); err != nil {
			return nil, err
		}
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, err
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if strings.Contains(cfg.Env["OTEL_TRACES_EXPORTER"], "otlp") {
		var exp sdktrace.SpanExporter
		if cfg.Env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf" {
			exp, err = otlptracehttp.New(ctx)
		} else {
			exp, err = otlptracegrpc.New(ctx)
		}
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	return sdktrace.NewTracerProvider(opts...), nil // sampler: OTEL_TRACES_SAMPLER(_ARG)
}
