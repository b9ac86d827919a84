package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/kagenti/platform/pkg/duck/ducktest"
)

// TestNoTemplateEngine: built with the shipped tags (hack/go-build-tags), the binary links neither
// gRPC's debug pages (golang.org/x/net/trace) nor html/template. Executing a template calls
// methods by name through reflection, and once that is reachable the linker keeps every exported
// method of every type stored in an interface: the federation's gRPC made the binary 66 MB instead
// of 38.
func TestNoTemplateEngine(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", ducktest.BuildTags(), "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "golang.org/x/net/trace" || pkg == "html/template" {
			t.Errorf("the binary links %s (hack/go-build-tags: %q)", pkg, ducktest.BuildTags())
		}
	}
}
