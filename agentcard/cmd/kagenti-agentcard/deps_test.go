package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBinaryDoesNotLinkTestFixtures keeps out of the controller what it must not carry: the test
// cards (the local cluster's sample card is a file, hack/local/weather-agent-card.json, given to
// serve-sample-card), and k8s.io/apiserver, which controller-runtime's metrics filters linked
// (about 260 packages, a third of the binary and of its resident memory) for the TokenReview and
// SubjectAccessReview that pkg/duck/kit/metricsauth makes with client-go alone.
func TestBinaryDoesNotLinkTestFixtures(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/kagenti/platform/agentcard/internal/testcards", "k8s.io/apiserver/", "github.com/google/cel-go/"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("the binary links %s", pkg)
			}
		}
	}
}
