package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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
	with := run("with", labelled)
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
	t.Logf("API server create, %d Deployments, concurrency %d:", n, concurrency)
	t.Logf("  with webhook:    p50 %s  p99 %s", p(with, .5), p(with, .99))
	t.Logf("  without webhook: p50 %s  p99 %s", p(without, .5), p(without, .99))
	t.Logf("  without webhook, pre-injected object of the same size: p50 %s  p99 %s", p(sameSize, .5), p(sameSize, .99))
	t.Logf("  ratio p50 %.2f, p99 %.2f; added p50 %s, p99 %s",
		float64(p(with, .5))/float64(p(without, .5)), float64(p(with, .99))/float64(p(without, .99)),
		p(with, .5)-p(without, .5), p(with, .99)-p(without, .99))
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

// BenchmarkServeHTTP is BenchmarkHandler through the HTTP handler served at Path: reading the body,
// decoding the AdmissionReview, the handler, encoding the patch and writing the response (TLS and
// the API server excluded).
func BenchmarkServeHTTP(b *testing.B) {
	seed := seedSample(b)
	for _, bc := range []struct {
		name string
		obj  runtime.Object
	}{
		{"1-container", deployment("agents", 1, 0)},
		{"2x20-env", deployment("agents", 2, 20)},
		{"seed-sample", seed},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := injectorwebhook.HTTPHandler(newHandler())
			body := review(b, admissionv1.Create, deploymentGVK, bc.obj)
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
