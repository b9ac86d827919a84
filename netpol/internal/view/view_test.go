package view

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func card(spec, status map[string]any) *unstructured.Unstructured {
	u := NewAgentCard()
	u.SetName("weather")
	u.SetNamespace("agents")
	u.Object["spec"] = spec
	if status != nil {
		u.Object["status"] = status
	}
	return u
}

func verdict(status, reason string, generation int64) map[string]any {
	return map[string]any{"type": ConditionVerified, "status": status, "reason": reason, "message": "m",
		"observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"}
}

func TestFromUnstructured(t *testing.T) {
	u := card(map[string]any{
		"targetRef":       map[string]any{"kind": "Deployment", "name": "weather"},
		"identityBinding": map[string]any{},
	}, map[string]any{
		"signature": map[string]any{"verified": true, "keyID": "k"},
		"binding":   map[string]any{"bound": true},
		"conditions": []any{
			map[string]any{"type": "NetworkPolicyReady", "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"},
			verdict("False", "IdentityMismatch", 0),
		},
	})
	c, err := FromUnstructured(u)
	require.NoError(t, err)
	assert.Equal(t, "weather", c.TargetRef.Name)
	require.NotNil(t, c.Condition("NetworkPolicyReady"))
	assert.Nil(t, c.Condition("Ready"))
	assert.Equal(t, Verification{Reason: "not verified (IdentityMismatch: m)"}, c.Verify(),
		"the Verified condition is the verdict, whatever status.signature and status.binding say")
}

func TestFromUnstructuredNamesBadField(t *testing.T) {
	_, err := FromUnstructured(card(map[string]any{"selector": "app=x"}, nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.selector")
}

func TestVerifyStaleOrMissingVerdict(t *testing.T) {
	u := card(map[string]any{}, map[string]any{"conditions": []any{verdict("True", "Verified", 1)}})
	u.SetGeneration(2)
	c, err := FromUnstructured(u)
	require.NoError(t, err)
	v := c.Verify()
	assert.False(t, v.Verified)
	assert.Contains(t, v.Reason, "generation 1")

	u.SetGeneration(1)
	c, err = FromUnstructured(u)
	require.NoError(t, err)
	assert.Equal(t, Verification{Verified: true, Reason: "verified (m)"}, c.Verify())

	c, err = FromUnstructured(card(map[string]any{}, nil))
	require.NoError(t, err)
	assert.Equal(t, Verification{Reason: "agentcard has not reported a verdict yet"}, c.Verify())
}

// verdictCase is one row of pkg/duck/testdata/verdicts.yaml, the table agentcard's envtest runs
// against the real controller and records what it wrote.
type verdictCase struct {
	Name      string         `json:"name"`
	Signature string         `json:"signature,omitempty"`
	Binding   string         `json:"binding,omitempty"`
	Verified  bool           `json:"verified"`
	AgentCard map[string]any `json:"agentCard,omitempty"`
}

// TestVerdictTable: for every case of the shared table, netpol reads from what agentcard wrote
// the verdict agentcard reached (and labelled the pods with).
func TestVerdictTable(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "../../../pkg/duck/testdata/verdicts.yaml"))
	require.NoError(t, err)
	var table struct {
		Cases []verdictCase `json:"cases"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &table))
	require.GreaterOrEqual(t, len(table.Cases), 17)
	for _, tc := range table.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			require.NotNil(t, tc.AgentCard, "no agentCard recorded (UPDATE_VERDICTS=1 on agentcard's TestVerdictTable)")
			u := card(map[string]any{"targetRef": map[string]any{"kind": "Deployment", "name": "weather"}}, nil)
			for k, v := range tc.AgentCard {
				if k == "metadata" {
					continue
				}
				if k == "spec" {
					for sk, sv := range v.(map[string]any) {
						u.Object["spec"].(map[string]any)[sk] = sv
					}
					continue
				}
				u.Object[k] = v
			}
			gen, _, _ := unstructured.NestedFloat64(tc.AgentCard, "metadata", "generation") // YAML numbers decode as float64
			u.SetGeneration(int64(gen))
			c, err := FromUnstructured(u)
			require.NoError(t, err)
			v := c.Verify()
			assert.Equal(t, tc.Verified, v.Verified, v.Reason)
			assert.NotEmpty(t, v.Reason)
		})
	}
}

func TestStatusOf(t *testing.T) {
	u := NewAgentCard()
	u.SetName("c")
	u.SetNamespace("ns")
	u.SetGeneration(3)
	u.Object["status"] = map[string]any{
		"observedGeneration": int64(2),
		"signature":          map[string]any{"verified": true}, // agentcard's own field: not read
		"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "CardAvailable",
			"lastTransitionTime": "2026-01-01T00:00:00Z"}},
	}
	s := StatusOf(u)
	assert.Equal(t, AgentCardGVK, s.GroupVersionKind())
	assert.Equal(t, int64(3), s.Generation)
	assert.Equal(t, int64(2), s.Status.ObservedGeneration)
	require.Len(t, s.Status.Conditions, 1)
	assert.True(t, s.Status.IsReady())

	u.Object["status"] = map[string]any{"conditions": "not a list"}
	assert.Empty(t, StatusOf(u).Status.Conditions, "a status that does not parse reads as empty")
}
