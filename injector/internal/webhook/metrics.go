package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Results of an admission request, the "result" label of kagenti_injector_requests_total.
const (
	ResultMutated   = "mutated"   // a patch was returned
	ResultUnchanged = "unchanged" // selected, but already as it should be (or a Job update, or admitted with a warning)
	ResultSkipped   = "skipped"   // not ours: not labelled, excluded namespace, other operation, hostNetwork
	ResultDenied    = "denied"    // invalid label or annotation value, forged label in the template, port clash
	ResultError     = "error"     // malformed request
)

// Metrics are the injector's Prometheus metrics.
type Metrics struct {
	Requests      *prometheus.CounterVec
	Duration      prometheus.Histogram
	ConfigReloads *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kagenti_injector_requests_total",
			Help: "Admission requests handled, by workload kind, operation and result.",
		}, []string{"kind", "operation", "result"}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kagenti_injector_mutation_duration_seconds",
			Help: "Time spent in the admission handler, from the decoded request to the encoded patch (decode of the object, render, inject, patch); excludes reading the body, decoding the AdmissionReview, writing the response and TLS.",
			// 25µs … ~0.8s: the handler is expected to take well under a millisecond.
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16),
		}),
		ConfigReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kagenti_injector_config_reloads_total",
			Help: "Configuration reloads, by result (success, error).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Duration, m.ConfigReloads)
	}
	return m
}
