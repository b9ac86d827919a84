package metricsauth

import (
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ServerOptions are the metrics endpoint options of every Kagenti controller: HTTPS (a
// self-signed certificate) only to callers whose bearer token the API server accepts (TokenReview)
// and who may GET the /metrics URL (SubjectAccessReview: ClusterRole kagenti-metrics-reader), or,
// with secure false, plain HTTP to anyone, for local processes.
//
// The response is never gzipped: it is a few tens of kilobytes, and each gzip writer the handler
// allocates (pooled only until the next garbage collections) holds about 800 KB of heap, the
// largest single item of an idle controller.
func ServerOptions(bindAddress string, secure bool) metricsserver.Options {
	o := metricsserver.Options{BindAddress: bindAddress, SecureServing: secure,
		HandlerOpts: []func(*promhttp.HandlerOpts){func(h *promhttp.HandlerOpts) { h.DisableCompression = true }}}
	if secure {
		o.FilterProvider = Provider
	}
	return o
}
