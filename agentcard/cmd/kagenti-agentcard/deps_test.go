package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBinaryDoesNotLinkTestFixtures keeps the test cards out of the controller: the local
// cluster's sample card is a file (hack/local/weather-agent-card.json) given to serve-sample-card.
func TestBinaryDoesNotLinkTestFixtures(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/kagenti/platform/agentcard/internal/testcards") {
			t.Errorf("the binary links %s", pkg)
		}
	}
}
