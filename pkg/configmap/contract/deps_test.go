package contract_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The package links nothing but the standard library, so the sidecar that imports it links no
// Kubernetes library through it. `go list -deps` names every package it needs, the test-only ones
// left out; a standard-library package is one `go list` marks Standard.
func TestContractIsStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg != "github.com/kagenti/platform/pkg/configmap/contract" {
			t.Errorf("package contract links %s, which is not in the standard library", pkg)
		}
	}
}
