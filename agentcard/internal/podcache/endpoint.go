package podcache

import (
	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/fetch"
)

// DefaultPort is the card port when the pod names no "a2a" or "http" container port.
const DefaultPort = 8081

// defaultPaths are the card paths tried when spec.endpoint names none; shared by every pod's sync
// state, never modified.
var defaultPaths = []string{fetch.PathAgentCard, fetch.PathLegacy}

// Endpoint resolves scheme, port and paths of a pod's card from the AgentCard's spec.endpoint and
// the pod's ports.
func Endpoint(c *v1alpha1.AgentCard, p *Pod) (scheme string, port int32, paths []string) {
	scheme, paths = "http", defaultPaths
	if e := c.Spec.Endpoint; e != nil {
		if e.Scheme != "" {
			scheme = e.Scheme
		}
		if e.Path != "" {
			paths = []string{e.Path}
		}
		port = e.Port
	}
	if port == 0 {
		port = p.CardPort
	}
	if port == 0 {
		port = DefaultPort
	}
	return scheme, port, paths
}
