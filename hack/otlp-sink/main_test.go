package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestSinkKeepsWhatTheSDKExports: the OpenTelemetry Go SDK's OTLP/HTTP exporter (protobuf) sends
// to the sink, and /spans lists each span with its resource and attributes; the oldest go first.
func TestSinkKeepsWhatTheSDKExports(t *testing.T) {
	s := &sink{keep: 3}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/traces", s.traces)
	mux.HandleFunc("GET /spans", s.spans)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "weather"), attribute.String("team", "a"))))
	rootCtx, root := tp.Tracer("test").Start(ctx, "root")
	for _, name := range []string{"one", "two", "three", "four"} {
		_, sp := tp.Tracer("test").Start(rootCtx, name)
		sp.SetAttributes(attribute.String("gen_ai.operation.name", "execute_tool"), attribute.Int("n", 7))
		sp.End()
	}
	root.End()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get(srv.URL + "/spans")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []Span
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sp := range got {
		names = append(names, sp.Name)
		if sp.Name == "root" {
			continue
		}
		if sp.TraceID != root.SpanContext().TraceID().String() || sp.ParentSpanID != root.SpanContext().SpanID().String() || len(sp.SpanID) != 16 {
			t.Errorf("span %s: trace %s span %s parent %s; want the root's trace and the root as parent", sp.Name, sp.TraceID, sp.SpanID, sp.ParentSpanID)
		}
		if sp.Resource["service.name"] != "weather" || sp.Resource["team"] != "a" {
			t.Errorf("span %s: resource %v", sp.Name, sp.Resource)
		}
		if sp.Attributes["gen_ai.operation.name"] != "execute_tool" || sp.Attributes["n"] != "7" {
			t.Errorf("span %s: attributes %v", sp.Name, sp.Attributes)
		}
	}
	if strings.Join(names, ",") != "three,four,root" {
		t.Errorf("kept %v, want the last three", names)
	}
}

func TestSinkRefusesWhatItCannotDecode(t *testing.T) {
	s := &sink{keep: 3}
	for ct, want := range map[string]int{"text/plain": http.StatusUnsupportedMediaType, "application/x-protobuf": http.StatusBadRequest} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/traces", strings.NewReader("\xff\xff garbage"))
		req.Header.Set("Content-Type", ct)
		s.traces(rec, req)
		if rec.Code != want {
			t.Errorf("%s: status %d, want %d (%s)", ct, rec.Code, want, rec.Body)
		}
	}
}
