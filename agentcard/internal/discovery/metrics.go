package discovery

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kagenti_agentcard_discovery_requests_total",
		Help: "Discovery API requests by HTTP status code (429: rate limited).",
	}, []string{"code"})
	reviews = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kagenti_agentcard_discovery_reviews_total",
		Help: "TokenReviews and SubjectAccessReviews the discovery API sent to the API server (cache misses).",
	}, []string{"kind"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(requests, reviews)
}

func observeRequest(code int) { requests.WithLabelValues(strconv.Itoa(code)).Inc() }

func observeReview(kind string) { reviews.WithLabelValues(kind).Inc() }
