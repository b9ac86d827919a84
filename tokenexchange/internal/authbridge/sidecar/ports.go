package sidecar

// Status ports of the long-running roles (GET /healthz, /readyz, /status on all interfaces) and
// spiffe-helper's health port. The tokenexchange controller reads /status from the pod IP
// (operators may read the others; the injector sets no probes), and proxy-init never redirects them.
const (
	RegisterStatusPort     = 15124
	InboundStatusPort      = 15125
	OutboundStatusPort     = 15126
	SpiffeHelperHealthPort = 15127
)
