package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBinaryDoesNotLinkTekton keeps Tekton's Go module (and the knative, OpenTelemetry and gRPC
// packages it brings) out of the controller: it writes Tekton's objects through internal/tekton;
// Tekton's own types serve only the tests, as the oracle those types are checked against. It keeps
// k8s.io/apiserver out too: through controller-runtime's metrics filters it linked about 260
// packages (CEL, gRPC, OpenTelemetry), a third of the binary and of its resident memory, for the
// metrics endpoint's TokenReview and SubjectAccessReview, which pkg/duck/kit/metricsauth makes with client-go.
func TestBinaryDoesNotLinkTekton(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/tektoncd/", "knative.dev/pkg/apis", "google.golang.org/grpc", "k8s.io/apiserver/", "github.com/google/cel-go/"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("the binary links %s", pkg)
			}
		}
	}
}
