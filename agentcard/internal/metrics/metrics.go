// Package metrics holds agentcard's Prometheus metrics, registered with controller-runtime's registry.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	fetches = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kagenti_agentcard_fetch_duration_seconds",
		Help:    "Card fetches from pods by result (Success, NotModified, Invalid, Timeout, Unreachable, NotFound, TooLarge, ...).",
		Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 2.5, 5},
	}, []string{"result"})
	verifications = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kagenti_agentcard_verifications_total",
		Help: "Card signature verifications by result and reason.",
	}, []string{"result", "reason"})
	statusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kagenti_agentcard_status_writes_total",
		Help: "AgentCard status writes (server-side apply) and skipped writes (status unchanged).",
	}, []string{"result"})
	bundleAge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kagenti_agentcard_trust_bundle_age_seconds",
		Help: "Seconds since the trust bundle was last loaded (0 when none is loaded).",
	}, func() float64 {
		if bundleLoadedAt == nil {
			return 0
		}
		t := bundleLoadedAt()
		if t.IsZero() {
			return 0
		}
		return time.Since(t).Seconds()
	})
	bundleLoadedAt func() time.Time
	cardCache      = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kagenti_agentcard_card_cache_bytes",
		Help: "Bytes of agent cards kept between syncs (bounded by --max-cached-card-bytes).",
	}, func() float64 {
		if cardCacheSize == nil {
			return 0
		}
		return cardCacheSize()
	})
	cardCacheSize func() float64
)

func init() {
	ctrlmetrics.Registry.MustRegister(fetches, verifications, statusWrites, bundleAge, cardCache)
}

// ObserveFetch records one fetch.
func ObserveFetch(result string, d time.Duration) {
	fetches.WithLabelValues(result).Observe(d.Seconds())
}

// ObserveVerification records one signature verification.
func ObserveVerification(verified bool, reason string) {
	r := "failure"
	if verified {
		r = "success"
	}
	verifications.WithLabelValues(r, reason).Inc()
}

// ObserveStatusWrite records a status write ("applied"), a skipped one ("unchanged"), a refused one
// ("failed") and the minimal status that withdrew a verdict after a refusal ("withdrawn").
func ObserveStatusWrite(result string) { statusWrites.WithLabelValues(result).Inc() }

// SetCardCacheSize tells the card cache gauge how to read the cache's size.
func SetCardCacheSize(f func() float64) { cardCacheSize = f }

// SetBundleClock tells the trust-bundle age gauge when the bundle was loaded.
func SetBundleClock(f func() time.Time) { bundleLoadedAt = f }
