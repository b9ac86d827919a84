// Package tracingtest is an in-test OTLP trace receiver, over HTTP (protobuf, gzip or not) and
// gRPC, that keeps both the raw bytes it received (to search them for what must never be
// exported) and the spans, flattened for assertions.
package tracingtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // accepts gzip, as a collector does
	"google.golang.org/protobuf/proto"
)

// Span is one received span.
type Span struct {
	Name         string
	Kind         tracepb.Span_SpanKind
	TraceID      []byte
	SpanID       []byte
	ParentSpanID []byte
	StatusCode   tracepb.Status_StatusCode
	// Resource and Attributes are the resource's and the span's attributes, values as strings
	// (lists joined by ",").
	Resource   map[string]string
	Attributes map[string]string
	// Events are the span's events: name and attributes.
	Events []Event
}

// Event is a span event.
type Event struct {
	Name       string
	Attributes map[string]string
}

// Receiver keeps what it received.
type Receiver struct {
	// Endpoint is host:port (gRPC) or the base URL (HTTP) of the receiver.
	Endpoint string

	mu    sync.Mutex
	raw   [][]byte
	spans []Span
	got   chan struct{}
}

func newReceiver() *Receiver { return &Receiver{got: make(chan struct{}, 1)} }

// NewHTTP starts an OTLP/HTTP receiver (POST /v1/traces); Endpoint is its base URL.
func NewHTTP(t testing.TB) *Receiver {
	rcv := newReceiver()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(b, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rcv.add(b, req)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	rcv.Endpoint = srv.URL
	return rcv
}

type grpcService struct {
	coltracepb.UnimplementedTraceServiceServer
	rcv *Receiver
}

func (g grpcService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	b, _ := proto.Marshal(req)
	g.rcv.add(b, req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// NewGRPC starts an OTLP/gRPC receiver on 127.0.0.1; Endpoint is its host:port.
func NewGRPC(t testing.TB) *Receiver {
	rcv := newReceiver()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, grpcService{rcv: rcv})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	rcv.Endpoint = lis.Addr().String()
	return rcv
}

func (r *Receiver) add(raw []byte, req *coltracepb.ExportTraceServiceRequest) {
	var spans []Span
	for _, rs := range req.GetResourceSpans() {
		res := flatten(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := Span{Name: sp.GetName(), Kind: sp.GetKind(), TraceID: sp.GetTraceId(), SpanID: sp.GetSpanId(),
					ParentSpanID: sp.GetParentSpanId(), StatusCode: sp.GetStatus().GetCode(),
					Resource: res, Attributes: flatten(sp.GetAttributes())}
				for _, e := range sp.GetEvents() {
					s.Events = append(s.Events, Event{Name: e.GetName(), Attributes: flatten(e.GetAttributes())})
				}
				spans = append(spans, s)
			}
		}
	}
	r.mu.Lock()
	r.raw = append(r.raw, raw)
	r.spans = append(r.spans, spans...)
	r.mu.Unlock()
	select {
	case r.got <- struct{}{}:
	default:
	}
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Named returns the received spans named name.
func (r *Receiver) Named(name string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Raw returns every request body received, concatenated (decompressed, as protobuf).
func (r *Receiver) Raw() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Join(r.raw, nil)
}

// Requests is how many export requests arrived.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.raw)
}

// Wait waits until at least n spans arrived, or fails t after 10 seconds (a bound for a stuck
// test, not a timing assertion).
func (r *Receiver) Wait(t testing.TB, n int) []Span {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if s := r.Spans(); len(s) >= n {
			return s
		}
		select {
		case <-r.got:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d spans received, want %d", len(r.Spans()), n)
		}
	}
}

func flatten(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[kv.GetKey()] = value(kv.GetValue())
	}
	return out
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_ArrayValue:
		var b bytes.Buffer
		for i, e := range x.ArrayValue.GetValues() {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(value(e))
		}
		return b.String()
	}
	return v.String()
}
