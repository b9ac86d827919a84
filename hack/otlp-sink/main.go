// Command kagenti-otlp-sink is an OTLP/HTTP trace receiver for tests: it accepts
// ExportTraceServiceRequests on /v1/traces (protobuf, as the OpenTelemetry SDKs send them, or JSON)
// and lists the spans it kept on /spans, so that a test can see what an agent exported. It keeps
// the last --keep spans in memory. Never use it for anything but tests.
package main

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"mime"
	"net/http"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened for a test to read.
type Span struct {
	Name string `json:"name"`
	// TraceID, SpanID and ParentSpanID are hex, as in a traceparent header ("" for a root's parent).
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId,omitempty"`
	// Resource holds the resource attributes (service.name among them), Attributes the span's.
	Resource   map[string]string `json:"resource"`
	Attributes map[string]string `json:"attributes"`
	Received   time.Time         `json:"received"`
}

type sink struct {
	keep int
	mu   sync.Mutex
	recv []Span
}

const maxBody = 4 << 20

func (s *sink) traces(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	req := &coltracepb.ExportTraceServiceRequest{}
	switch ct {
	case "application/x-protobuf":
		err = proto.Unmarshal(body, req)
	case "application/json":
		err = protojson.Unmarshal(body, req)
	default:
		http.Error(w, fmt.Sprintf("Content-Type %q: application/x-protobuf or application/json", ct), http.StatusUnsupportedMediaType)
		return
	}
	if err != nil {
		http.Error(w, "decoding ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now().UTC()
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := flatten(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				got = append(got, Span{Name: sp.GetName(), TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					ParentSpanID: hex.EncodeToString(sp.GetParentSpanId()), Resource: res, Attributes: flatten(sp.GetAttributes()), Received: now})
			}
		}
	}
	s.mu.Lock()
	s.recv = append(s.recv, got...)
	if over := len(s.recv) - s.keep; over > 0 {
		s.recv = append(s.recv[:0:0], s.recv[over:]...)
	}
	s.mu.Unlock()
	log.Printf("received %d spans", len(got))
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (s *sink) spans(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := append([]Span(nil), s.recv...)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// flatten renders attribute values as strings (protojson's form for anything but scalars).
func flatten(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			b, _ := protojson.Marshal(v)
			m[kv.GetKey()] = string(b)
		}
	}
	return m
}

func main() {
	addr := flag.String("addr", ":4318", "listen address (OTLP/HTTP's port)")
	keep := flag.Int("keep", 5000, "spans kept (the oldest go first)")
	flag.Parse()
	s := &sink{keep: *keep}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/traces", s.traces)
	mux.HandleFunc("GET /spans", s.spans)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	log.Printf("OTLP/HTTP sink on %s", *addr)
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
