package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBinaryDoesNotLinkTekton keeps Tekton's Go module (and the knative API packages it brings) out
// of the controller: it writes Tekton's objects through internal/tekton; Tekton's own types serve
// only the tests, as the oracle those types are checked against. (gRPC is linked anyway, through
// k8s.io/apiserver, by controller-runtime's authenticating metrics filter.)
func TestBinaryDoesNotLinkTekton(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/tektoncd/", "knative.dev/pkg/apis"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("the binary links %s", pkg)
			}
		}
	}
}
