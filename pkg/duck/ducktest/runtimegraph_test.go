package ducktest_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// What "out of the runtime graph" means: a pillar's go.mod lists ducktest and its dependencies
// (a module's test-only imports are requirements too), but no binary links them. This test holds
// the second half for every binary of the repository: `go list -deps` of each main package, the
// packages its build compiles, names neither ducktest nor testify, gopher-lua or kstatus.
func TestNoBinaryLinksTestSupport(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	binaries, err := filepath.Glob(filepath.Join(root, "*", "cmd", "*"))
	if err != nil || len(binaries) < 7 {
		t.Fatalf("binaries under */cmd: %v, %v", binaries, err)
	}
	for _, dir := range binaries {
		cmd := exec.Command("go", "list", "-deps", ".")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps in %s: %v\n%s", dir, err, out)
		}
		for _, pkg := range strings.Fields(string(out)) {
			for _, banned := range []string{"github.com/kagenti/platform/pkg/duck/ducktest", "github.com/stretchr/testify", "github.com/yuin/gopher-lua", "sigs.k8s.io/cli-utils/pkg/kstatus"} {
				if strings.HasPrefix(pkg, banned) {
					rel, _ := filepath.Rel(root, dir)
					t.Errorf("%s links %s", rel, pkg)
				}
			}
		}
	}
}
