package podlabels

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/verify"
)

// What a sync calls for on a pod's label, and what replaces true when the verdict is not positive.
func TestWantAndItsValues(t *testing.T) {
	verified := verify.Verdict{Signature: signature.Result{Verified: true}, Binding: signature.BindingResult{Bound: true}}
	unbound := verify.Verdict{Signature: signature.Result{Verified: true}, Binding: signature.BindingResult{Reason: signature.ReasonIdentityMismatch}}
	unsigned := verify.Verdict{Signature: signature.Result{Reason: signature.ReasonNoSignature}}
	for _, tc := range []struct {
		name       string
		hasCard    bool
		verdict    verify.Verdict
		requireSig bool
		want       Label
		value      string
		sets       bool
		revoked    string
	}{
		{"no card: the label stays", false, verified, false, LabelKept, "", false, "false"},
		{"verified and bound", true, verified, false, LabelTrue, "true", true, "false"},
		{"signer not bound", true, unbound, false, LabelFalse, "false", true, "false"},
		{"unsigned, not required: no label", true, unsigned, false, LabelAbsent, "", true, ""},
		{"unsigned, required", true, unsigned, true, LabelFalse, "false", true, "false"},
	} {
		got := Want(tc.hasCard, tc.verdict, tc.requireSig)
		assert.Equal(t, tc.want, got, tc.name)
		v, ok := got.value()
		assert.Equal(t, tc.value, v, tc.name)
		assert.Equal(t, tc.sets, ok, tc.name)
		if got != LabelTrue {
			assert.Equal(t, tc.revoked, got.revokedValue(), tc.name)
		}
	}
}

// Only agentcard's own label may differ for two label sets to count as the same (a pod labelled
// by a sync does not trigger another).
func TestSameExceptOurs(t *testing.T) {
	base := map[string]string{"app": "weather"}
	assert.True(t, SameExceptOurs(base, map[string]string{"app": "weather", "kagenti.io/signature-verified": "true"}))
	assert.True(t, SameExceptOurs(map[string]string{"app": "weather", "kagenti.io/signature-verified": "false"}, base))
	assert.False(t, SameExceptOurs(base, map[string]string{"app": "other"}))
	assert.False(t, SameExceptOurs(base, map[string]string{"app": "weather", "tier": "agent"}))
	assert.False(t, SameExceptOurs(map[string]string{"app": "weather", "tier": "agent"}, map[string]string{"app": "weather", "kagenti.io/signature-verified": "true"}))
}
