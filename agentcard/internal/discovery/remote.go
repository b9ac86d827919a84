package discovery

import (
	"encoding/json"
	"sort"
	"time"
)

// RemoteCard is a card of another cluster, as the federation hub accepted it.
type RemoteCard struct {
	Cluster, Namespace, Name string
	// Card is the card as the member sent it (with its signatures); the hub verified it.
	Card     json.RawMessage
	CardHash string
	// SpiffeID is the signer the hub verified, an identity of the card's namespace in the member's
	// trust domain.
	SpiffeID string
	// Stale: the member has been silent past its TTL.
	Stale bool
	// LastSeen is when the hub last heard from the member; VerifiedAt when the hub verified the
	// card; MemberVerifiedAt when the member's Verified condition last turned True.
	LastSeen, VerifiedAt, MemberVerifiedAt time.Time
}

// RemoteCatalog is the federation hub's catalogue of other clusters' cards.
type RemoteCatalog interface {
	// RemoteCards lists the cards of cluster (every cluster when ""), in namespace (every one when "").
	RemoteCards(cluster, namespace string) []RemoteCard
	// RemoteCard returns one card.
	RemoteCard(cluster, namespace, name string) (RemoteCard, bool)
	// Serving is false on a hub replica that is not the leader: it holds no member's cards.
	Serving() bool
}

// Freshness says how current a federated card is: when the hub verified it, when the member had
// verified it, and when the hub last heard from the member.
type Freshness struct {
	Stale            bool       `json:"stale"`
	LastSeen         *time.Time `json:"lastSeen,omitempty"`
	HubVerifiedAt    *time.Time `json:"hubVerifiedAt,omitempty"`
	MemberVerifiedAt *time.Time `json:"memberVerifiedAt,omitempty"`
}

func remoteAgent(rc RemoteCard, withCard bool) Agent {
	a := Agent{Cluster: rc.Cluster, Namespace: rc.Namespace, Name: rc.Name, CardHash: rc.CardHash, SpiffeID: rc.SpiffeID,
		// The hub serves only cards it verified and bound to the namespace's identity itself.
		Verified: true, Bound: true, Ready: !rc.Stale}
	tags := map[string]bool{}
	fillFromCard(&a, rc.Card, tags)
	for t := range tags {
		a.Tags = append(a.Tags, t)
	}
	sort.Strings(a.Tags)
	if withCard {
		a.Card = rc.Card
	}
	f := &Freshness{Stale: rc.Stale}
	for _, t := range []struct {
		at  time.Time
		dst **time.Time
	}{{rc.LastSeen, &f.LastSeen}, {rc.VerifiedAt, &f.HubVerifiedAt}, {rc.MemberVerifiedAt, &f.MemberVerifiedAt}} {
		if !t.at.IsZero() {
			v := t.at.UTC()
			*t.dst = &v
		}
	}
	a.Freshness = f
	return a
}
