package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/metrics"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/injector/internal/inject"
	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
)

// TestLoad creates 1,000 labelled Deployments with concurrency 16 through the real API server with
// the webhook, then 1,000 unlabelled ones (the webhook is not called: objectSelector) in the same
// run, and reports the webhook's own latency (p50/p99 from its histogram) and the API server's
// create latency with and without it. It reports; it asserts nothing about time.
//
//	KAGENTI_LOAD=1 [KAGENTI_LOAD_CONCURRENCY=1] go test -count=1 -run TestLoad -v ./injector/internal/webhook/
func TestLoad(t *testing.T) {
	if os.Getenv("KAGENTI_LOAD") != "1" {
		t.Skip("load test: set KAGENTI_LOAD=1 to run it (not part of make test)")
	}
	const n = 1000
	concurrency := 16
	if c, err := strconv.Atoi(os.Getenv("KAGENTI_LOAD_CONCURRENCY")); err == nil && c > 0 {
		concurrency = c // e.g. 1: one request at a time
	}
	s := startSuite(t)
	ns := s.namespace(t, "load", map[string]string{"kagenti.io/injection": "enabled"})

	plain := s.namespace(t, "load-plain", nil)
	// The same Deployment, already injected: isolates the webhook's cost from the larger object.
	injectedTmpl := func() corev1.PodTemplateSpec {
		d := &appsv1.Deployment{}
		require.NoError(t, s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "with-0"}, d))
		return d.Spec.Template
	}
	var preInjected *corev1.PodTemplateSpec
	run := func(prefix string, labels map[string]string) []time.Duration {
		var (
			mu   sync.Mutex
			lats []time.Duration
			wg   sync.WaitGroup
			next = make(chan int)
		)
		for range concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					obj := workloads(ns, fmt.Sprintf("%s-%d", prefix, i), labels, nil)["Deployment"]
					if preInjected != nil {
						obj = workloads(plain, fmt.Sprintf("%s-%d", prefix, i), labels, nil)["Deployment"]
						obj.(*appsv1.Deployment).Spec.Template = *preInjected.DeepCopy()
					}
					start := time.Now()
					err := s.c.Create(context.Background(), obj)
					d := time.Since(start)
					require.NoError(t, err)
					mu.Lock()
					lats = append(lats, d)
					mu.Unlock()
				}
			}()
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		return lats
	}
	// Interleaving would be fairer to a warming API server; run a warm-up first instead.
	run("warmup", map[string]string{"app": "warmup"})
	s.timings.reset()
	handshakes := s.handshakes.Load()
	rt := readRuntimeMetrics()
	api := s.apiServerAdmission(t)
	with := run("with", labelled)
	rt = readRuntimeMetrics().since(rt)
	api = s.apiServerAdmission(t).since(api)
	handle, serve := s.timings.sorted()
	handshakes = s.handshakes.Load() - handshakes
	without := run("without", map[string]string{"app": "plain"})
	tmpl := injectedTmpl()
	preInjected = &tmpl
	sameSize := run("preinjected", labelled) // labelled, but in a namespace the webhook ignores

	var m dto.Metric
	require.NoError(t, s.metrics.Duration.Write(&m))
	h := m.GetHistogram()
	t.Logf("webhook handler (histogram, %d requests): p50 %s, p99 %s, mean %s",
		h.GetSampleCount(), histQuantile(h, 0.5), histQuantile(h, 0.99),
		time.Duration(h.GetSampleSum()/float64(h.GetSampleCount())*float64(time.Second)))
	p := func(l []time.Duration, q float64) time.Duration { return l[int(q*float64(len(l)-1))] }
	t.Logf("webhook handler (exact, %d requests): p50 %s, p99 %s, max %s", len(handle), p(handle, .5), p(handle, .99), handle[len(handle)-1])
	t.Logf("webhook HTTP handler (body read to response written, %d requests): p50 %s, p99 %s, max %s", len(serve), p(serve, .5), p(serve, .99), serve[len(serve)-1])
	t.Logf("TLS handshakes with the webhook during those %d admissions: %d", len(serve), handshakes)
	t.Logf("test process (the webhook and its client; the API server and etcd are other processes) during the webhook run: %d GCs, GC pause p99 %s max %s; runnable goroutines waiting for a CPU p99 %s, max %s",
		rt.gcCycles, rt.gcPauses.quantile(.99), rt.gcPauses.max(), rt.schedLatencies.quantile(.99), rt.schedLatencies.max())
	t.Logf("the API server's own means over those %d creates (its /metrics): the call to the webhook %s, the mutating admission step (webhook and patch) %s, a Deployment create %s",
		n, api.webhook.mean(), api.admit.mean(), api.create.mean())
	t.Logf("API server create, %d Deployments, concurrency %d:", n, concurrency)
	t.Logf("  with webhook:    p50 %s  p99 %s", p(with, .5), p(with, .99))
	t.Logf("  without webhook: p50 %s  p99 %s", p(without, .5), p(without, .99))
	t.Logf("  without webhook, pre-injected object of the same size: p50 %s  p99 %s", p(sameSize, .5), p(sameSize, .99))
	t.Logf("  ratio p50 %.2f, p99 %.2f; added p50 %s, p99 %s",
		float64(p(with, .5))/float64(p(without, .5)), float64(p(with, .99))/float64(p(without, .99)),
		p(with, .5)-p(without, .5), p(with, .99)-p(without, .99))
}

// apiServerTotals are sums and counts of the API server's own admission and request histograms,
// for means over a run: apiserver_admission_webhook_admission_duration_seconds (the call to a
// mutating webhook, from sending the review to having its answer), ..._step_admission_duration_seconds
// of type admit (every mutating admission plugin, the webhook's patch applied) and
// apiserver_request_duration_seconds of a Deployment create (the whole request, server side).
type apiServerTotals struct{ webhook, admit, create sumCount }

type sumCount struct {
	sum   float64
	count uint64
}

func (s sumCount) mean() time.Duration {
	if s.count == 0 {
		return 0
	}
	return time.Duration(s.sum / float64(s.count) * float64(time.Second))
}

func (a apiServerTotals) since(prev apiServerTotals) apiServerTotals {
	d := func(x, y sumCount) sumCount { return sumCount{x.sum - y.sum, x.count - y.count} }
	return apiServerTotals{d(a.webhook, prev.webhook), d(a.admit, prev.admit), d(a.create, prev.create)}
}

// apiServerAdmission reads the API server's /metrics (as the envtest admin) and sums the histograms
// apiServerTotals names, for CREATE requests on deployments.
func (s *suite) apiServerAdmission(t *testing.T) apiServerTotals {
	t.Helper()
	cs, err := kubernetes.NewForConfig(s.env.Config)
	require.NoError(t, err)
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	require.NoError(t, err)
	sum := func(family string, match map[string]string) sumCount {
		var out sumCount
		for _, m := range families[family].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			ok := true
			for k, v := range match {
				ok = ok && labels[k] == v
			}
			if ok {
				out.sum += m.GetHistogram().GetSampleSum()
				out.count += m.GetHistogram().GetSampleCount()
			}
		}
		return out
	}
	return apiServerTotals{
		webhook: sum("apiserver_admission_webhook_admission_duration_seconds", map[string]string{"type": "admit", "operation": "CREATE"}),
		admit:   sum("apiserver_admission_step_admission_duration_seconds", map[string]string{"type": "admit", "operation": "CREATE"}),
		create:  sum("apiserver_request_duration_seconds", map[string]string{"verb": "POST", "resource": "deployments"}),
	}
}

// timings records the exact duration of every admission twice: around the Handler (the span of its
// histogram) and around the HTTP handler (reading the body to writing the response).
type timings struct {
	mu            sync.Mutex
	handle, serve []time.Duration
}

func (tm *timings) handler(h admission.Handler) admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		start := time.Now()
		resp := h.Handle(ctx, req)
		tm.add(&tm.handle, time.Since(start))
		return resp
	})
}

func (tm *timings) serveHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		tm.add(&tm.serve, time.Since(start))
	})
}

func (tm *timings) add(to *[]time.Duration, d time.Duration) {
	tm.mu.Lock()
	*to = append(*to, d)
	tm.mu.Unlock()
}

func (tm *timings) reset() {
	tm.mu.Lock()
	tm.handle, tm.serve = nil, nil
	tm.mu.Unlock()
}

func (tm *timings) sorted() (handle, serve []time.Duration) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	handle, serve = slices.Clone(tm.handle), slices.Clone(tm.serve)
	slices.Sort(handle)
	slices.Sort(serve)
	return handle, serve
}

// runtimeMetrics are the test process's GC and scheduler figures (runtime/metrics), cumulative.
type runtimeMetrics struct {
	gcCycles                 uint64
	gcPauses, schedLatencies histogram
}

func readRuntimeMetrics() runtimeMetrics {
	samples := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/sched/pauses/total/gc:seconds"}, {Name: "/sched/latencies:seconds"}}
	metrics.Read(samples)
	return runtimeMetrics{
		gcCycles:       samples[0].Value.Uint64(),
		gcPauses:       histogramOf(samples[1].Value.Float64Histogram()),
		schedLatencies: histogramOf(samples[2].Value.Float64Histogram()),
	}
}

// since is what happened between prev and m.
func (m runtimeMetrics) since(prev runtimeMetrics) runtimeMetrics {
	return runtimeMetrics{gcCycles: m.gcCycles - prev.gcCycles, gcPauses: m.gcPauses.minus(prev.gcPauses), schedLatencies: m.schedLatencies.minus(prev.schedLatencies)}
}

type histogram struct {
	counts  []uint64
	buckets []float64
}

func histogramOf(h *metrics.Float64Histogram) histogram {
	return histogram{counts: slices.Clone(h.Counts), buckets: h.Buckets}
}

func (h histogram) minus(prev histogram) histogram {
	out := histogram{counts: slices.Clone(h.counts), buckets: h.buckets}
	for i := range out.counts {
		out.counts[i] -= prev.counts[i]
	}
	return out
}

// quantile is the upper bound of the bucket holding quantile q.
func (h histogram) quantile(q float64) time.Duration {
	var total uint64
	for _, c := range h.counts {
		total += c
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if c > 0 && float64(seen) >= q*float64(total) {
			return time.Duration(h.buckets[i+1] * float64(time.Second))
		}
	}
	return 0
}

// max is the upper bound of the highest bucket with a count.
func (h histogram) max() time.Duration {
	for i := len(h.counts) - 1; i >= 0; i-- {
		if h.counts[i] > 0 {
			return time.Duration(h.buckets[i+1] * float64(time.Second))
		}
	}
	return 0
}

// histQuantile estimates a quantile from a Prometheus histogram by linear interpolation inside the
// bucket (as histogram_quantile does).
func histQuantile(h *dto.Histogram, q float64) time.Duration {
	rank := q * float64(h.GetSampleCount())
	var prevCount uint64
	prevBound := 0.0
	for _, b := range h.GetBucket() {
		if float64(b.GetCumulativeCount()) >= rank {
			inBucket := float64(b.GetCumulativeCount() - prevCount)
			frac := 1.0
			if inBucket > 0 {
				frac = (rank - float64(prevCount)) / inBucket
			}
			return time.Duration((prevBound + frac*(b.GetUpperBound()-prevBound)) * float64(time.Second))
		}
		prevCount, prevBound = b.GetCumulativeCount(), b.GetUpperBound()
	}
	return time.Duration(prevBound * float64(time.Second))
}

// BenchmarkHandler measures the whole admission handler (decode, render, inject, JSON Patch) on a
// CREATE of realistic Deployments: one container, two containers with 20 variables each, the
// seed's sample (the golden input, with spiffe), and the large one of BenchmarkInject (10
// containers, 500 variables).
func BenchmarkHandler(b *testing.B) {
	seed := seedSample(b)
	for _, bc := range []struct {
		name string
		obj  runtime.Object
	}{
		{"1-container", deployment("agents", 1, 0)},
		{"2x20-env", deployment("agents", 2, 20)},
		{"seed-sample", seed},
		{"10x50-env", deployment("agents", 10, 50)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := newHandler()
			raw := review(b, admissionv1.Create, deploymentGVK, bc.obj)
			var ar admissionv1.AdmissionReview
			require.NoError(b, json.Unmarshal(raw, &ar))
			req := admission.Request{AdmissionRequest: *ar.Request}
			req.UID = types.UID("bench")
			b.ReportAllocs()
			for b.Loop() {
				resp := h.Handle(context.Background(), req)
				if !resp.Allowed || len(resp.Patch) == 0 {
					b.Fatalf("unexpected response %+v", resp.Result)
				}
			}
		})
	}
}

// benchObject is a workload a benchmark admits.
type benchObject struct {
	name string
	obj  runtime.Object
}

// httpBenchObjects are the workloads the HTTP path's benchmarks admit: the realistic three
// (one container, two with 20 variables each, the seed's sample).
func httpBenchObjects(b *testing.B) []benchObject {
	return []benchObject{
		{"1-container", deployment("agents", 1, 0)},
		{"2x20-env", deployment("agents", 2, 20)},
		{"seed-sample", seedSample(b)},
	}
}

// serveAdmissions is the loop of the HTTP benchmarks: h answers body, an AdmissionReview, with a
// patch, through httptest's request and recorder.
func serveAdmissions(b *testing.B, h http.Handler, body []byte) {
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, injectorwebhook.Path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`"patch":`)) {
			b.Fatalf("unexpected response %d %s", rec.Code, rec.Body)
		}
	}
}

// BenchmarkServeHTTP is BenchmarkHandler through the HTTP handler served at Path: reading the body,
// decoding the AdmissionReview, the handler, encoding the patch and writing the response (TLS and
// the API server excluded).
func BenchmarkServeHTTP(b *testing.B) {
	for _, bc := range httpBenchObjects(b) {
		b.Run(bc.name, func(b *testing.B) {
			h := injectorwebhook.HTTPHandler(newHandler())
			body := review(b, admissionv1.Create, deploymentGVK, bc.obj)
			serveAdmissions(b, h, body)
		})
	}
}

// BenchmarkServeHTTPHarness is BenchmarkServeHTTP's own cost: the same request and recorder, served
// by a handler that reads the body and writes an answer of the size the webhook writes. Subtracted
// from BenchmarkServeHTTP, it leaves what the webhook allocates (net/http's server reuses its
// readers and writers across requests; httptest allocates them per request).
func BenchmarkServeHTTPHarness(b *testing.B) {
	for _, bc := range httpBenchObjects(b) {
		b.Run(bc.name, func(b *testing.B) {
			body := review(b, admissionv1.Create, deploymentGVK, bc.obj)
			answer := func() []byte {
				req := httptest.NewRequest(http.MethodPost, injectorwebhook.Path, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				injectorwebhook.HTTPHandler(newHandler()).ServeHTTP(rec, req)
				return rec.Body.Bytes()
			}()
			var scratch bytes.Buffer
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				scratch.Reset()
				_, _ = scratch.ReadFrom(r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(answer)
			})
			serveAdmissions(b, h, body)
		})
	}
}

// seedSample is the inject package's golden input Deployment, labelled for spiffe.
func seedSample(tb testing.TB) *appsv1.Deployment {
	b, err := os.ReadFile("../inject/testdata/inputs/deployment.yaml")
	require.NoError(tb, err)
	d := &appsv1.Deployment{}
	require.NoError(tb, yaml.Unmarshal(b, d))
	d.Labels[inject.LabelSpiffe] = "enabled"
	return d
}
