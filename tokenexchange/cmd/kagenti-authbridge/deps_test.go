package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSidecarLinksNoControllerLibrary keeps the sidecar in every agent pod free of the controller
// libraries: it shares names, paths and ports with the injector through pkg/configmap/contract
// (standard library only) and the probe line through pkg/configmap/appprobe (the kubelet's types),
// never through a package that brings controller-runtime, client-go or kmeta (issue 30: it linked
// them for three constants, 796 packages in all).
func TestSidecarLinksNoControllerLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go/", "knative.dev/", "github.com/kagenti/platform/pkg/duck", "github.com/kagenti/platform/pkg/configmap/podsecurity"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("kagenti-authbridge links %s", pkg)
			}
		}
		if pkg == "github.com/kagenti/platform/pkg/configmap" {
			t.Errorf("kagenti-authbridge links %s (kmeta and the injected-parts reader); import pkg/configmap/contract", pkg)
		}
	}
}

// TestNoTemplateEngine: built with the shipped tags (hack/go-build-tags), the sidecar links
// neither gRPC's debug pages (golang.org/x/net/trace, which the external authorizer's gRPC would
// bring) nor html/template, whose method calls by name through reflection keep every exported
// method of every interface type in the binary: 32.0 MB instead of 24.6.
func TestNoTemplateEngine(t *testing.T) {
	tags, err := os.ReadFile("../../../hack/go-build-tags")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-tags", strings.TrimSpace(string(tags)), "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "golang.org/x/net/trace" || pkg == "html/template" {
			t.Errorf("kagenti-authbridge links %s (hack/go-build-tags: %q)", pkg, strings.TrimSpace(string(tags)))
		}
	}
}
