package framework

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SystemNamespace is where the pillars run when they are deployed into a cluster (kind).
const SystemNamespace = "kagenti-system"

// Pillar is a pillar binary that `hack/local.sh up` started as a local process.
type Pillar struct {
	// Name is the pillar name, e.g. "tokenexchange" (the binary is kagenti-<Name>).
	Name string
	// HealthPort serves /healthz and /readyz on 127.0.0.1.
	HealthPort int
}

// ReadyzURL is the pillar's readiness endpoint.
func (p Pillar) ReadyzURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/readyz", p.HealthPort)
}

// PillarsFile is where `hack/local.sh up` lists the pillars it started ("<name> <health port>" per line).
func PillarsFile() string { return filepath.Join(Root(), ".local", "pillars.txt") }

// RunningPillars returns the pillar binaries the local cluster runs as processes (from
// .local/pillars.txt). It is empty when no pillar binary was built, and on kind, where the pillars
// run in the cluster instead (see RequirePillar).
func RunningPillars(t testing.TB) []Pillar {
	t.Helper()
	if ClusterKind() != "local" {
		return nil
	}
	f, err := os.Open(PillarsFile())
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading the running pillars: %v", err)
	}
	defer f.Close()
	var out []Pillar
	s := bufio.NewScanner(f)
	for line := 1; s.Scan(); line++ {
		text := strings.TrimSpace(s.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			t.Fatalf("%s:%d: want \"<pillar> <health port>\", got %q", PillarsFile(), line, text)
		}
		port, err := strconv.Atoi(fields[1])
		if err != nil || port <= 0 || port > 65535 {
			t.Fatalf("%s:%d: bad health port %q", PillarsFile(), line, fields[1])
		}
		out = append(out, Pillar{Name: fields[0], HealthPort: port})
	}
	if err := s.Err(); err != nil {
		t.Fatalf("reading %s: %v", PillarsFile(), err)
	}
	return out
}

// RequirePillar skips the test with a clear message when the pillar is not running: on the local
// cluster when bin/kagenti-<name> was not built (so `hack/local.sh up` did not start it), on kind
// when there is no Deployment kagenti-<name> in kagenti-system.
func RequirePillar(t testing.TB, c client.Client, name string) {
	t.Helper()
	if ClusterKind() == "local" {
		for _, p := range RunningPillars(t) {
			if p.Name == name {
				return
			}
		}
		t.Skipf("kagenti-%s is not running on the local cluster (bin/kagenti-%s missing? `make build`, then `make e2e`)", name, name)
	}
	var d appsv1.Deployment
	err := c.Get(context.Background(), client.ObjectKey{Namespace: SystemNamespace, Name: "kagenti-" + name}, &d)
	if apierrors.IsNotFound(err) {
		t.Skipf("kagenti-%s is not deployed in %s on this %s cluster", name, SystemNamespace, ClusterKind())
	}
	if err != nil {
		t.Fatalf("looking up deployment %s/kagenti-%s: %v", SystemNamespace, name, err)
	}
}
