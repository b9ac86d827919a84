package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/kagenti/platform/pkg/duck/kit"
)

// specDigestAnnotation carries, on a NetworkPolicy held by netpol's cache, the digest of the spec
// the cache transform dropped (digestPolicySpec). It exists only in memory: the policy writer
// removes it before every write.
const specDigestAnnotation = "kagenti.io/cached-spec-digest"

// digestPolicySpec is the cache transform of netpol's NetworkPolicies: it replaces the spec by its
// digest and drops managedFields. The reconciler reads of a cached policy its metadata (owner,
// labels, annotations) and whether its spec is the one it would write, which the digest answers
// (policyContent); a typed spec of ingress and egress peers, each with its label selectors, was
// 60 % of a cached policy. Readers that need the spec read from the API server.
func digestPolicySpec(obj any) (any, error) {
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return obj, nil
	}
	// The object is fresh from the watch decoder and not shared yet: changed in place.
	digest := specDigest(&np.Spec)
	np.Spec, np.ManagedFields = networkingv1.NetworkPolicySpec{}, nil
	if np.Annotations == nil {
		np.Annotations = map[string]string{}
	}
	np.Annotations[specDigestAnnotation] = digest
	return np, nil
}

// specDigest is the SHA-256 of the spec's JSON encoding, which is deterministic (struct fields in
// order, map keys sorted) and, like equality.Semantic, does not tell a nil list or map from an
// empty one (both are omitted).
func specDigest(spec *networkingv1.NetworkPolicySpec) string {
	b, err := json.Marshal(spec)
	if err != nil { // a NetworkPolicySpec always encodes; never equal to a real digest if not
		return "unencodable: " + err.Error()
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// storedSpecDigest is the digest of np's spec as stored: the one the cache transform recorded, or
// computed when np was read from the API server.
func storedSpecDigest(np *networkingv1.NetworkPolicy) string {
	if d, ok := np.Annotations[specDigestAnnotation]; ok {
		return d
	}
	return specDigest(&np.Spec)
}

// policyContent is what netpol writes of a NetworkPolicy besides its metadata: the spec, compared
// by digest, so that a policy from the cache (spec digested) and one from the API server compare
// alike; a stored policy with the same spec is not rewritten, a hand edit is undone.
var policyContent = kit.Content[*networkingv1.NetworkPolicy]{
	UpToDate: func(have, want *networkingv1.NetworkPolicy) bool {
		return storedSpecDigest(have) == specDigest(&want.Spec)
	},
	Copy: func(dst, src *networkingv1.NetworkPolicy) {
		dst.Spec = src.Spec
		delete(dst.Annotations, specDigestAnnotation)
	},
}
