package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kagenti/platform/pkg/duck/ducktest"
	"github.com/kagenti/platform/pkg/duck/kit/command/commandtest"
)

// TestHelpUnchanged: -h is testdata/help.txt, updated only with a deliberate flag change. The
// flags are the member's of kagenti-agentcard, less --federation and the hub's.
func TestHelpUnchanged(t *testing.T) { commandtest.HelpUnchanged(t, options(), "testdata/help.txt") }

// TestLinksTheMemberAgentAlone: built with the shipped tags, the binary links the member agent and
// none of the rest of agentcard (the AgentCard controller, card fetching and verification, the
// discovery API, the hub), nor a template engine: that is what keeps the process small beside
// the controller (docs/benchmarks.md). Its lease is its own, kagenti-agentcard-federation-member.kagenti.io
// (the binary's name), apart from the controller's.
func TestLinksTheMemberAgentAlone(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", ducktest.BuildTags(), "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	assert.Contains(t, deps, "github.com/kagenti/platform/agentcard/internal/federation/member")
	const internal = "github.com/kagenti/platform/agentcard/internal/"
	allowed := map[string]bool{internal + "federation/member": true, internal + "federation/tlsid": true, internal + "federation/wire": true}
	for _, pkg := range deps {
		if strings.HasPrefix(pkg, internal) && !allowed[pkg] {
			t.Errorf("the member agent links %s", pkg)
		}
		if pkg == "golang.org/x/net/trace" || pkg == "html/template" {
			t.Errorf("the binary links %s (hack/go-build-tags: %q)", pkg, ducktest.BuildTags())
		}
	}
	assert.Equal(t, "kagenti-agentcard-federation-member", options().Name, "the lease's name")
}
