package main

import (
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
