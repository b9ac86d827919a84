package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeanDependencies keeps k8s.io/apiserver out of the binary. Through controller-runtime's
// metrics filters it linked about 260 packages (CEL, gRPC, OpenTelemetry): a third of the binary
// and of its resident memory, for the metrics endpoint's TokenReview and SubjectAccessReview,
// which pkg/duck/kit/metricsauth makes with client-go alone. cel-go itself is linked on purpose:
// the webhook and the controller compile a TokenExchange's authorization rules with the data
// plane's own compiler (authz.Compile), so admission and the proxy never disagree.
func TestLeanDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/apiserver/") {
			t.Errorf("the binary links %s", pkg)
		}
	}
}
