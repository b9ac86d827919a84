// Package telemetry holds the authbridge's metrics: token exchanges, authorization and egress
// decisions, and the calls each workload receives, by caller and delegation chain (the edges of the delegation
// graph). Every status port serves them at /metrics in the Prometheus text format. Labels carry
// workload identities and rule names, never a token, a subject or a scope.
package telemetry

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/kagenti/platform/pkg/configmap/contract"
)

// MaxCallers bounds the (caller, via) pairs kept as label values; calls of further pairs are counted
// under caller "other", so a stream of tokens naming ever new clients cannot grow the process.
const MaxCallers = 256

// Metrics are one process's metrics.
type Metrics struct {
	registry        *prometheus.Registry
	exchanges       *prometheus.CounterVec
	exchangeSeconds prometheus.Histogram
	decisions       *prometheus.CounterVec
	decisionSeconds prometheus.Histogram
	requests        *prometheus.CounterVec
	calls           *prometheus.CounterVec
	egress          *prometheus.CounterVec

	mu      sync.Mutex
	callers map[[2]string]struct{}
}

// Default is the process's metrics, which the proxies record into and the status ports serve.
var Default = New()

// New returns metrics on a registry of their own.
func New() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		exchanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kagenti_authbridge_exchanges_total",
			Help: "Outbound token exchanges (RFC 8693) by result: issued (the identity provider answered), cached, failed.",
		}, []string{"result"}),
		exchangeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kagenti_authbridge_exchange_duration_seconds",
			Help:    "Time of the calls to the identity provider's token endpoint.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kagenti_authbridge_decisions_total",
			Help: "Inbound authorization decisions by result (allow, deny, would_deny in a dry run) and the rule that decided.",
		}, []string{"result", "rule"}),
		decisionSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kagenti_authbridge_decision_duration_seconds",
			Help:    "Time of one inbound authorization decision.",
			Buckets: []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2, .1, 1},
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kagenti_authbridge_inbound_requests_total",
			Help: "Inbound requests that needed a token, by result: allowed, denied (authorization), unauthorized (no or invalid token), bad_request.",
		}, []string{"result"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: contract.MetricCalls,
			Help: "Inbound calls with a valid token, by the immediate caller, the workloads the call came through before it (the token's delegation chain after the caller, comma-separated, the first actor last) and the result: the edges of the delegation graph.",
		}, []string{contract.CallsCaller, contract.CallsVia, contract.CallsResult}),
		egress: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kagenti_authbridge_egress_total",
			Help: "Outbound connections and requests the egress policy decided, by result (allow, deny, would_deny in a dry run), rule (allow[i], dns, default) and protocol (http, connect, tls, tcp).",
		}, []string{"result", "rule", "protocol"}),
		callers: map[[2]string]struct{}{},
	}
	m.registry.MustRegister(m.exchanges, m.exchangeSeconds, m.decisions, m.decisionSeconds, m.requests, m.calls, m.egress)
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Exchange records one exchange: cached, or a call to the identity provider that took d.
func (m *Metrics) Exchange(cached bool, d time.Duration, err error) {
	switch {
	case cached:
		m.exchanges.WithLabelValues("cached").Inc()
		return
	case err != nil:
		m.exchanges.WithLabelValues("failed").Inc()
	default:
		m.exchanges.WithLabelValues("issued").Inc()
	}
	m.exchangeSeconds.Observe(d.Seconds())
}

// Decision records one authorization decision that took d.
func (m *Metrics) Decision(result, rule string, d time.Duration) {
	m.decisions.WithLabelValues(result, rule).Inc()
	if d > 0 {
		m.decisionSeconds.Observe(d.Seconds())
	}
}

// Egress records one egress decision. Its labels are bounded: the policy's own rule names (at
// most 64 rules), a fixed result and protocol set.
func (m *Metrics) Egress(result, rule, protocol string) {
	m.egress.WithLabelValues(result, rule, protocol).Inc()
}

// Request records an inbound request that needed a token.
func (m *Metrics) Request(result string) { m.requests.WithLabelValues(result).Inc() }

// Call records a call with a valid token from caller, through chain (the token's delegation
// chain, the caller first), and whether it was let through.
func (m *Metrics) Call(caller string, chain []string, allowed bool) {
	via := ""
	if len(chain) > 1 {
		via = strings.Join(chain[1:], ",")
	}
	key := [2]string{caller, via}
	m.mu.Lock()
	if _, ok := m.callers[key]; !ok {
		if len(m.callers) >= MaxCallers {
			key = [2]string{"other", ""}
		} else {
			m.callers[key] = struct{}{}
		}
	}
	m.mu.Unlock()
	result := contract.CallDenied
	if allowed {
		result = contract.CallAllowed
	}
	m.calls.WithLabelValues(key[0], key[1], result).Inc()
}

// Sum is the total of metric name over the series whose labels include labels: a counter's value,
// a histogram's count. For tests and diagnostics.
func (m *Metrics) Sum(name string, labels map[string]string) float64 {
	families, err := m.registry.Gather()
	if err != nil {
		return 0
	}
	return SumOf(families, name, labels)
}

// SumOf is Sum over metric families read elsewhere (e.g. /metrics, parsed).
func SumOf(families []*dto.MetricFamily, name string, labels map[string]string) float64 {
	var v float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, want := range labels {
				if have[k] != want {
					continue next
				}
			}
			if c := s.GetCounter(); c != nil {
				v += c.GetValue()
			} else if h := s.GetHistogram(); h != nil {
				v += float64(h.GetSampleCount())
			}
		}
	}
	return v
}
