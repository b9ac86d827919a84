package hub

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/card"
	"github.com/kagenti/platform/agentcard/internal/federation/wire"
	"github.com/kagenti/platform/agentcard/internal/signature"
)

// MaxCardBytes is the largest card the hub accepts from a member (what an AgentCard status holds).
const MaxCardBytes = 256 << 10

// Refusal is why the hub refused one card.
type Refusal struct {
	Reason, Message string
}

// Verified is a card the hub accepted, with what the hub itself established about it.
type Verified struct {
	Card   *card.Card
	Signer spiffeid.ID
}

// VerifyCard decides whether the member registered as reg may publish u. It trusts nothing the
// member says about the card: the JWS is verified again against the member's own trust bundle,
// the signer must belong to the member's trust domain and to the card's namespace, and must be the
// identity the member says it bound. The checks run in order and the first failure is the reason.
func VerifyCard(reg Registration, u *wire.Upsert, now time.Time) (Verified, *Refusal) {
	if len(u.Card) > MaxCardBytes {
		return Verified{}, refuse(v1alpha1.ReasonCardTooLargeForHub, "the card is %d bytes, more than the hub's limit of %d", len(u.Card), MaxCardBytes)
	}
	if reg.Namespaces != nil && !reg.Namespaces[u.Namespace] {
		return Verified{}, refuse(v1alpha1.ReasonNamespaceNotExported, "namespace %q is not in FederatedCluster %s spec.namespaces", u.Namespace, reg.Name)
	}
	c, err := card.Parse(u.Card)
	if err != nil {
		return Verified{}, refuse(v1alpha1.ReasonCardInvalid, "invalid agent card: %v", err)
	}
	res := (&signature.Verifier{Bundle: reg.Bundle, Now: func() time.Time { return now }}).Verify(c)
	if !res.Verified {
		if claimed, ok := claimedSigner(c); ok && claimed.TrustDomain() != reg.TrustDomain {
			return Verified{}, refuse(v1alpha1.ReasonSignerOutsideTrustDomain, "the card is signed by %s, outside the member's trust domain %q (%s)", claimed, reg.TrustDomain.Name(), res.Message)
		}
		return Verified{}, refuse(res.Reason, "%s", res.Message)
	}
	signer, err := spiffeid.FromString(res.SpiffeID)
	if err != nil || signer.TrustDomain() != reg.TrustDomain {
		return Verified{}, refuse(v1alpha1.ReasonSignerOutsideTrustDomain, "the card is signed by %s, outside the member's trust domain %q", res.SpiffeID, reg.TrustDomain.Name())
	}
	if !ownedBy(signer, u.Namespace) {
		return Verified{}, refuse(v1alpha1.ReasonNamespaceNotOwned, "the card of namespace %q is signed by %s, which is not an identity of that namespace (spiffe://%s/ns/%s/...)", u.Namespace, signer, reg.TrustDomain.Name(), u.Namespace)
	}
	if u.SpiffeID != signer.String() {
		return Verified{}, refuse(v1alpha1.ReasonIdentityNotClaimed, "the member bound the card to %q but it is signed by %s", u.SpiffeID, signer)
	}
	return Verified{Card: c, Signer: signer}, nil
}

// ownedBy applies the workload identity layout (spiffe://<td>/ns/<namespace>/...): a namespace's
// cards are signed by its own identities, so one namespace cannot replay another's card.
func ownedBy(id spiffeid.ID, namespace string) bool {
	segs := strings.Split(strings.TrimPrefix(id.Path(), "/"), "/")
	return len(segs) >= 2 && segs[0] == "ns" && segs[1] == namespace
}

// claimedSigner reads the SPIFFE ID the first signature's leaf certificate claims, unverified: it
// only names the refusal.
func claimedSigner(c *card.Card) (spiffeid.ID, bool) {
	if len(c.Signatures) == 0 {
		return spiffeid.ID{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(c.Signatures[0].Protected, "="))
	if err != nil {
		return spiffeid.ID{}, false
	}
	var h struct {
		X5c []string `json:"x5c"`
	}
	if json.Unmarshal(raw, &h) != nil || len(h.X5c) == 0 {
		return spiffeid.ID{}, false
	}
	der, err := base64.StdEncoding.DecodeString(h.X5c[0])
	if err != nil {
		return spiffeid.ID{}, false
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil || len(leaf.URIs) != 1 {
		return spiffeid.ID{}, false
	}
	id, err := spiffeid.FromURI(leaf.URIs[0])
	return id, err == nil
}

func refuse(reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}
