package view

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

func TestFromUnstructured(t *testing.T) {
	u := card(map[string]any{
		"targetRef":       map[string]any{"kind": "Deployment", "name": "weather"},
		"identityBinding": map[string]any{},
	}, map[string]any{
		"signature":  map[string]any{"verified": true, "keyID": "k"},
		"binding":    map[string]any{"bound": false, "reason": "WrongIdentity", "message": "spiffe://x"},
		"conditions": []any{map[string]any{"type": "NetworkPolicyReady", "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}},
	})
	c, err := FromUnstructured(u)
	require.NoError(t, err)
	assert.Equal(t, "weather", c.TargetRef.Name)
	assert.True(t, c.BindingRequired, "an empty identityBinding still requires binding")
	require.NotNil(t, c.Condition("NetworkPolicyReady"))
	assert.Nil(t, c.Condition("Ready"))
	assert.Equal(t, Verification{Reason: "signature verified, identity binding not bound (WrongIdentity: spiffe://x)"}, c.Verify())
}

func TestFromUnstructuredNamesBadField(t *testing.T) {
	_, err := FromUnstructured(card(map[string]any{"selector": "app=x"}, nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.selector")
}

func TestVerify(t *testing.T) {
	sig := func(v bool) map[string]any { return map[string]any{"verified": v} }
	for _, tc := range []struct {
		name     string
		spec     map[string]any
		status   map[string]any
		verified bool
	}{
		{"not yet known", map[string]any{}, nil, false},
		{"signature verified", map[string]any{}, map[string]any{"signature": sig(true)}, true},
		{"signature failed", map[string]any{}, map[string]any{"signature": sig(false)}, false},
		{"binding ignored when not required", map[string]any{}, map[string]any{"signature": sig(true), "binding": map[string]any{"bound": false}}, true},
		{"binding required, not reported", map[string]any{"identityBinding": map[string]any{"trustDomain": "td"}}, map[string]any{"signature": sig(true)}, false},
		{"binding required, unbound", map[string]any{"identityBinding": map[string]any{}}, map[string]any{"signature": sig(true), "binding": map[string]any{"bound": false}}, false},
		{"binding required, bound", map[string]any{"identityBinding": map[string]any{}}, map[string]any{"signature": sig(true), "binding": map[string]any{"bound": true}}, true},
		{"bound but signature failed", map[string]any{"identityBinding": map[string]any{}}, map[string]any{"signature": sig(false), "binding": map[string]any{"bound": true}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromUnstructured(card(tc.spec, tc.status))
			require.NoError(t, err)
			v := c.Verify()
			assert.Equal(t, tc.verified, v.Verified, v.Reason)
			assert.NotEmpty(t, v.Reason)
		})
	}
}
