package resources

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/netpol/internal/view"
	"github.com/kagenti/platform/pkg/duck"
)

// Set UPDATE_GOLDEN=1 to rewrite testdata/*.golden.yaml from the current output.
var updateGolden = os.Getenv("UPDATE_GOLDEN") != ""

func verifiedCard() *view.AgentCard {
	return withVerdict(&view.AgentCard{
		Name: "weather-card", Namespace: "agents", UID: "uid-1", Generation: 1,
		TargetRef: &duck.TargetRef{Kind: "Deployment", Name: "weather"},
	}, metav1.ConditionTrue, "Verified", "signed by spiffe://cluster.local/ns/agents/sa/weather, the identity this card may claim")
}

// withVerdict sets agentcard's Verified condition on c, for c's generation.
func withVerdict(c *view.AgentCard, status metav1.ConditionStatus, reason, message string) *view.AgentCard {
	c.Conditions = []metav1.Condition{{Type: view.ConditionVerified, Status: status, Reason: reason, Message: message, ObservedGeneration: c.Generation}}
	return c
}

// workload builds the duck view of a workload of the given kind from a manifest.
func workload(t *testing.T, manifest string) *duck.Workload {
	t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(manifest), &u.Object))
	w, err := duck.NewWorkload(u)
	require.NoError(t, err)
	return w
}

const (
	statefulSet = `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db-agent, namespace: agents}
spec:
  selector: {matchLabels: {app: db-agent}}
  template:
    metadata: {labels: {app: db-agent, tier: data}}
    spec: {containers: [{name: a, image: x}]}
`
	job = `
apiVersion: batch/v1
kind: Job
metadata: {name: batch-agent, namespace: agents}
spec:
  selector: {matchLabels: {batch.kubernetes.io/controller-uid: 0f0e}}
  template:
    metadata: {labels: {app: batch-agent, batch.kubernetes.io/controller-uid: 0f0e}}
    spec: {containers: [{name: a, image: x}]}
`
	cronJob = `
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly-agent, namespace: agents}
spec:
  schedule: "0 0 * * *"
  jobTemplate:
    spec:
      template:
        metadata: {labels: {app: nightly-agent}}
        spec: {containers: [{name: a, image: x}]}
`
)

func TestMakeNetworkPolicyGolden(t *testing.T) {
	deploySel := metav1.LabelSelector{MatchLabels: map[string]string{"app": "weather"}}
	cases := map[string]func(t *testing.T) (*view.AgentCard, metav1.LabelSelector, Options){
		"verified": func(*testing.T) (*view.AgentCard, metav1.LabelSelector, Options) {
			return verifiedCard(), deploySel, DefaultOptions()
		},
		"verified-egress-verified": func(*testing.T) (*view.AgentCard, metav1.LabelSelector, Options) {
			o := DefaultOptions()
			o.Egress, o.EgressCIDRs = EgressVerified, []string{"192.0.2.0/24", "10.96.0.1/32"}
			return verifiedCard(), deploySel, o
		},
		"unverified": func(*testing.T) (*view.AgentCard, metav1.LabelSelector, Options) {
			c := withVerdict(verifiedCard(), metav1.ConditionFalse, "InvalidSignature", "signatures[0]: signature does not match the canonical card")
			return c, deploySel, DefaultOptions()
		},
		"not-yet-known": func(*testing.T) (*view.AgentCard, metav1.LabelSelector, Options) {
			c := verifiedCard()
			c.Conditions = nil
			return c, deploySel, DefaultOptions()
		},
		"identity-not-allowed": func(*testing.T) (*view.AgentCard, metav1.LabelSelector, Options) {
			c := withVerdict(verifiedCard(), metav1.ConditionFalse, "IdentityNotAllowed",
				"spec.identityBinding.spiffeID spiffe://cluster.local/ns/payments/sa/payments-agent is an identity of namespace payments")
			return c, deploySel, DefaultOptions()
		},
		"stale-verdict": func(*testing.T) (*view.AgentCard, metav1.LabelSelector, Options) {
			c := verifiedCard()
			c.Generation = 2 // the spec changed since agentcard's verdict
			return c, deploySel, DefaultOptions()
		},
		"selector-mode": func(*testing.T) (*view.AgentCard, metav1.LabelSelector, Options) {
			c := verifiedCard()
			c.Name, c.TargetRef = "search", nil
			c.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"search", "search-canary"}}}}
			return c, *c.Selector, DefaultOptions()
		},
		"statefulset": func(t *testing.T) (*view.AgentCard, metav1.LabelSelector, Options) {
			c := verifiedCard()
			c.TargetRef = &duck.TargetRef{Kind: "StatefulSet", Name: "db-agent"}
			sel, err := WorkloadPodSelector(workload(t, statefulSet))
			require.NoError(t, err)
			return c, sel, DefaultOptions()
		},
		"job": func(t *testing.T) (*view.AgentCard, metav1.LabelSelector, Options) {
			c := verifiedCard()
			c.TargetRef, c.Conditions = &duck.TargetRef{Kind: "Job", Name: "batch-agent"}, nil
			sel, err := WorkloadPodSelector(workload(t, job))
			require.NoError(t, err)
			return c, sel, DefaultOptions()
		},
		"cronjob": func(t *testing.T) (*view.AgentCard, metav1.LabelSelector, Options) {
			c := verifiedCard()
			c.TargetRef = &duck.TargetRef{Kind: "CronJob", Name: "nightly-agent"}
			sel, err := WorkloadPodSelector(workload(t, cronJob))
			require.NoError(t, err)
			return c, sel, DefaultOptions()
		},
		"long-workload-name": func(*testing.T) (*view.AgentCard, metav1.LabelSelector, Options) {
			c := verifiedCard()
			c.TargetRef.Name = strings.Repeat("a-very-long-agent-name-", 3) + "x"
			return c, deploySel, DefaultOptions()
		},
	}
	used := map[string]bool{}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			card, sel, opts := build(t)
			require.NoError(t, opts.Validate())
			np := MakeNetworkPolicy(card, sel, opts)
			assert.LessOrEqual(t, len(np.Name), 63, "NetworkPolicy names are DNS labels")
			got, err := yaml.Marshal(np)
			require.NoError(t, err)
			path := filepath.Join("testdata", name+".golden.yaml")
			used[filepath.Base(path)] = true
			if updateGolden {
				require.NoError(t, os.WriteFile(path, got, 0o644))
				return
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "missing golden; run with UPDATE_GOLDEN=1")
			assert.Equal(t, string(want), string(got))

			// Rendering is deterministic and does not alias its inputs.
			again, _ := yaml.Marshal(MakeNetworkPolicy(card, sel, opts))
			assert.Equal(t, string(got), string(again))
		})
	}
	t.Run("no unused goldens", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join("testdata", "*.golden.yaml"))
		require.NoError(t, err)
		for _, f := range files {
			assert.True(t, used[filepath.Base(f)], "stale golden %s: no test case uses it", f)
		}
	})
}

func TestPolicyName(t *testing.T) {
	c := verifiedCard()
	assert.Equal(t, "weather-agent-policy", PolicyName(c))
	c.TargetRef = nil
	assert.Equal(t, "weather-card-agent-policy", PolicyName(c), "selector mode is named after the card")
}

func TestWorkloadPodSelectorErrors(t *testing.T) {
	_, err := WorkloadPodSelector(workload(t, `
apiVersion: batch/v1
kind: CronJob
metadata: {name: bare, namespace: agents}
spec: {jobTemplate: {spec: {template: {spec: {containers: []}}}}}
`))
	require.Error(t, err)
	assert.Equal(t, duck.ReasonUnsupportedKind, duck.ReasonOf(err))
	assert.Contains(t, err.Error(), `CronJob "bare" has neither spec.selector nor pod template labels`)
}

func TestOptionsValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*Options)
		want   string
	}{
		"egress":             {func(o *Options) { o.Egress = "some" }, `--egress: "some" is not one of all, verified`},
		"cidr":               {func(o *Options) { o.EgressCIDRs = []string{"10.0.0.0"} }, `--egress-cidrs: "10.0.0.0" is not a CIDR`},
		"operator namespace": {func(o *Options) { o.OperatorNamespace = "" }, "--operator-namespace must not be empty"},
		"dns labels":         {func(o *Options) { o.DNSPodLabels = nil }, "--dns-labels"},
	} {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			tc.mutate(&o)
			err := o.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	assert.NoError(t, DefaultOptions().Validate())
}

func BenchmarkMakeNetworkPolicy(b *testing.B) {
	card := verifiedCard()
	sel := metav1.LabelSelector{MatchLabels: map[string]string{"app": "weather"}}
	opts := DefaultOptions()
	opts.Egress, opts.EgressCIDRs = EgressVerified, []string{"10.0.0.0/8", "192.0.2.0/24"}
	b.ReportAllocs()
	for b.Loop() {
		_ = MakeNetworkPolicy(card, sel, opts)
	}
}
