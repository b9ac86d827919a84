package e2e

import (
	"os"
	"testing"

	"github.com/kagenti/platform/e2e/framework/agent"
	"github.com/kagenti/platform/e2e/framework/podrunner"
)

// TestMain lets the test binary be the test kubelet's pod processes (podrunner) and the identity
// flow's stand-in agent when it is re-executed as one.
func TestMain(m *testing.M) {
	podrunner.Main(map[string]func() int{agentChild: agent.Main})
	os.Exit(m.Run())
}
