package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/e2e/framework"
)

// memberAgent is the federation member agent's Deployment, binary and image, and its lease.
const (
	memberAgent      = "kagenti-agentcard-federation-member"
	memberAgentLease = memberAgent + ".kagenti.io"
)

// TestKindFederationMemberAgentRuns: the member agent alone (kagenti-agentcard-federation-member,
// its own image) as the helm chart renders it with agentcard.federation.memberDeployment=true and
// the SPIRE socket by hostPath, on a real kubelet: its pod becomes ready as its manifest says
// (non-root, read-only root filesystem), gets its X.509-SVID from the real SPIRE agent as
// ServiceAccount kagenti-agentcard (hack/kind.sh registers it), elects itself on its own lease and
// starts streaming to its hub. There is no hub in this cluster: the stream itself is proven against
// real hubs on envtest (docs/federation.md); here, the image, the chart and the identity.
func TestKindFederationMemberAgentRuns(t *testing.T) {
	requireKind(t)
	c := framework.Client(t)
	framework.RequirePillar(t, c, "agentcard")
	requireKindSPIRE(t, c)
	ctx := context.Background()

	d := renderMemberAgent(t)
	sc := d.Spec.Template.Spec.Containers[0].SecurityContext
	if sc == nil || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || !ptr.Deref(sc.RunAsNonRoot, false) {
		t.Fatalf("the rendered member agent runs without a read-only root filesystem or as root: %+v", sc)
	}
	// A lease left by an earlier run would hold the new pod back until it expired.
	_ = c.Delete(ctx, &coordinationv1.Lease{ObjectMeta: leaseMeta()})
	if err := c.Create(ctx, d); err != nil {
		t.Fatalf("creating Deployment %s: %v", memberAgent, err)
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), d)
		_ = c.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: leaseMeta()})
	})

	start := time.Now()
	pod := readyPodMatching(t, c, "kagenti-system", memberAgent, d.Spec.Selector.MatchLabels)
	t.Logf("member agent ready %v after its Deployment was created", time.Since(start).Round(time.Second))

	framework.Eventually(t, 2*time.Minute, "the member agent holds its own lease", func(ctx context.Context) (bool, string, error) {
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: "kagenti-system", Name: memberAgentLease}, &l); err != nil {
			return false, err.Error(), nil
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		return strings.HasPrefix(holder, pod.Name), "holder " + holder, nil
	})
	// The line comes once its X.509-SVID and bundle came from the SPIRE agent's Workload API.
	framework.Eventually(t, 2*time.Minute, "the member agent has its SVID and dials its hub", func(context.Context) (bool, string, error) {
		logs := podLogs(t, "kagenti-system", pod.Name)
		return strings.Contains(logs, "streaming exported AgentCards to the federation hub"), logs, nil
	})
}

func leaseMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: "kagenti-system", Name: memberAgentLease}
}

// renderMemberAgent renders the umbrella chart as hack/kind.sh installs it, as a federation
// member whose agent runs apart, and returns the member agent's Deployment.
func renderMemberAgent(t *testing.T) *appsv1.Deployment {
	t.Helper()
	out, err := exec.Command(filepath.Join(framework.Root(), "bin", "helm"), "template", "kagenti", filepath.Join(framework.Root(), "deploy", "helm", "kagenti"),
		"--namespace", "kagenti-system", "--set", "agentcard.enabled=true",
		"--set", "agentcard.federation.mode=member", "--set", "agentcard.federation.memberDeployment=true",
		"--set", "agentcard.federation.clusterName=kind", "--set", "agentcard.federation.spiffeSocket.type=hostPath",
		"--set", "agentcard.federation.hubAddress=kagenti-agentcard-federation.hub.invalid:9443",
		"--set", "agentcard.federation.hubSpiffeID=spiffe://hub.example/ns/kagenti-system/sa/kagenti-agentcard",
		"--show-only", "charts/agentcard/templates/deployment.yaml").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	for _, doc := range strings.Split(string(out), "\n---") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatalf("a rendered document: %v", err)
		}
		if d.Kind == "Deployment" && d.Name == memberAgent {
			return &d
		}
	}
	t.Fatalf("helm renders no Deployment %s:\n%s", memberAgent, out)
	return nil
}
