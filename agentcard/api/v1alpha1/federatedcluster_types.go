package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/pkg/duck"
)

// Federation labels and names (docs/federation.md).
const (
	// LabelExport on an AgentCard: "true" exports it to the federation hub (opt-in, like a
	// Multi-Cluster Services ServiceExport). Any other value, or none, keeps it in its cluster.
	LabelExport = "kagenti.io/export"
	// ClusterPropertyClusterID is the About API (KEP-2149) ClusterProperty naming a cluster within
	// its ClusterSet. A member that has one must be registered on the hub under that name.
	ClusterPropertyClusterID = "cluster.clusterset.k8s.io"
	// LabelFederationLeader: "true" on the pod of the hub replica that holds the leader lease and
	// serves the members' streams. The federation Service selects it, so a member reaches the
	// leader on its first dial; a follower's discovery API forwards requests for the members'
	// cards to that pod. Set and removed by the leader itself.
	LabelFederationLeader = "kagenti.io/federation-leader"
)

// Condition types of a FederatedCluster.
const (
	// ConditionConnected: the member's stream is open and authenticated.
	ConditionConnected = "Connected"
	// ConditionCardsAccepted: every card the member sent passed the hub's verification.
	ConditionCardsAccepted = "CardsAccepted"
	// ConditionFederatedReady (Ready): the hub serves this member's cards and they are fresh.
	ConditionFederatedReady = duck.ConditionReady
	// ConditionTrustBundleCurrent (with spec.bundleEndpoint): the last fetch of the member's
	// bundle succeeded.
	ConditionTrustBundleCurrent = "TrustBundleCurrent"
)

// Reasons of a FederatedCluster's conditions: why a member, a stream or a card was refused.
const (
	ReasonStreamOpen   = "StreamOpen"
	ReasonDisconnected = "Disconnected"
	ReasonNeverSeen    = "NeverConnected"
	// ReasonUnknownCluster: a peer presented a valid SVID of this trust domain but is not the
	// member agent's identity (spec.agentSpiffeID), or named another cluster.
	ReasonUnknownCluster = "UnknownCluster"
	// ReasonClusterIDMismatch: the member's About API cluster ID differs from this registration.
	ReasonClusterIDMismatch = "ClusterIDMismatch"
	// ReasonCertificateExpired: the member's certificate expired (at the handshake or while the
	// stream was open: the hub closes a stream when its peer certificate expires).
	ReasonCertificateExpired = "CertificateExpired"
	// ReasonUntrustedCertificate: the member's certificate does not chain to spec.trustBundle.
	ReasonUntrustedCertificate = "UntrustedCertificate"
	// ReasonFrameTooLarge: a frame exceeded the hub's size limit; the stream was closed.
	ReasonFrameTooLarge = "FrameTooLarge"
	// ReasonMalformedFrame: a frame did not decode, or broke the protocol; the stream was closed.
	ReasonMalformedFrame = "MalformedFrame"
	// ReasonRateLimited: the member sent frames faster than the hub's per-cluster rate; the stream
	// was closed and the member reconnects with backoff.
	ReasonRateLimited = "RateLimited"
	// ReasonCardRefused: the hub refused at least one card; status.refusals says which and why.
	ReasonCardRefused      = "CardRefused"
	ReasonAllCardsAccepted = "AllCardsAccepted"
	// ReasonCardsServed (Ready=True): the member is connected and its cards are served.
	ReasonCardsServed = "CardsServed"
	// ReasonStale (Ready=False): the member was silent past spec.ttl; its cards are served marked stale.
	ReasonStale = "Stale"
	// ReasonWithdrawn (Ready=False): the member was silent past spec.ttl + spec.gracePeriod; its
	// cards are no longer served.
	ReasonWithdrawn = "Withdrawn"
	// ReasonNotLeader: this hub replica is not the leader; it neither accepts streams nor writes status.
	ReasonNotLeader = "NotLeader"
	// TrustBundleCurrent: ReasonBundleRefreshed (True); ReasonBundlePending (False: not fetched
	// yet); ReasonEndpointUnreachable (no answer, an HTTP error, a timeout);
	// ReasonEndpointNotAuthenticated (the endpoint's certificate is not the SPIFFE ID or host
	// expected); ReasonBundleRejected (not a bundle of the member trust domain, no X.509
	// authority, larger than 256 KiB). On a failure the bundle in effect stays.
	ReasonBundleRefreshed          = "Refreshed"
	ReasonBundlePending            = "Pending"
	ReasonEndpointUnreachable      = "EndpointUnreachable"
	ReasonEndpointNotAuthenticated = "EndpointNotAuthenticated"
	ReasonBundleRejected           = "BundleRejected"
)

// Reasons a single card is refused (status.refusals[].reason), beyond the verifier's own
// (NoSignature, UntrustedCertificateChain, CertificateExpired, InvalidSignature, ...).
const (
	ReasonCardInvalid              = "InvalidCard"
	ReasonCardTooLargeForHub       = "CardTooLarge"
	ReasonSignerOutsideTrustDomain = "SignerOutsideTrustDomain"
	ReasonNamespaceNotOwned        = "NamespaceNotOwned"
	ReasonNamespaceNotExported     = "NamespaceNotExported"
	ReasonIdentityNotClaimed       = "IdentityNotClaimed"
	ReasonTooManyCards             = "TooManyCards"
)

// FederatedClusterSpec registers one member cluster with the hub: who it is (a SPIFFE trust
// domain and the identity of its member agent) and what it may publish.
//
// +kubebuilder:validation:XValidation:rule="!has(self.agentSpiffeID) || self.agentSpiffeID.startsWith('spiffe://' + self.trustDomain + '/')",message="agentSpiffeID must be an identity of spec.trustDomain (spiffe://<trustDomain>/...)"
// +kubebuilder:validation:XValidation:rule="!has(self.ttl) || !has(self.gracePeriod) || duration(self.gracePeriod) >= duration(self.ttl)",message="gracePeriod must be at least ttl"
// +kubebuilder:validation:XValidation:rule="!has(self.bundleEndpoint) || !has(self.bundleEndpoint.spiffeID) || self.bundleEndpoint.spiffeID.startsWith('spiffe://' + self.trustDomain + '/')",message="bundleEndpoint.spiffeID must be an identity of spec.trustDomain (spiffe://<trustDomain>/...)"
type FederatedClusterSpec struct {
	// TrustDomain is the member's SPIFFE trust domain; each member has its own, and two
	// FederatedClusters may not share one (the second is refused with UnknownCluster).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9._-]+$`
	TrustDomain string `json:"trustDomain"`

	// TrustBundle holds the member trust domain's X.509 authorities: PEM certificates, or a SPIFFE
	// JSON bundle (what `spire-server bundle show -format spiffe` prints and a SPIFFE federation
	// bundle endpoint serves). The hub authenticates the member's stream and verifies every card's
	// signature against it, and against nothing else.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=262144
	TrustBundle string `json:"trustBundle"`

	// AgentSpiffeID is the SPIFFE ID the member agent must present. Default:
	// spiffe://<trustDomain>/ns/kagenti-system/sa/kagenti-agentcard.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^spiffe://[a-z0-9._-]+(/[A-Za-z0-9._-]+)+$')",message="agentSpiffeID must be a SPIFFE ID with a path, spiffe://<trust domain>/<path>"
	AgentSpiffeID string `json:"agentSpiffeID,omitempty"`

	// Namespaces, when set, are the only namespaces of the member whose cards the hub accepts
	// (NamespaceNotExported otherwise). Empty: every namespace.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	Namespaces []string `json:"namespaces,omitempty"`

	// TTL is how long the member may be silent (the member sends a heartbeat every third of it)
	// before its cards are served marked stale. Minimum 3s.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('3s')",message="ttl must be at least 3s"
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// GracePeriod is how long after the member fell silent its stale cards are withdrawn
	// (counted from the last frame, so it includes the TTL).
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	GracePeriod *metav1.Duration `json:"gracePeriod,omitempty"`

	// MaxCards bounds the cards the hub keeps for this member; cards beyond it are refused
	// (TooManyCards).
	// +optional
	// +kubebuilder:default=5000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxCards *int32 `json:"maxCards,omitempty"`

	// BundleEndpoint is the member trust domain's SPIFFE bundle endpoint (SPIFFE Federation). The
	// hub's leader fetches it every refreshInterval and trusts what it serves in place of
	// trustBundle, which stays the bootstrap bundle: an authority the endpoint stops serving stops
	// being trusted, so the member's CA rotates without anyone editing this object. Editing
	// trustBundle resets the member to it. Unset: trustBundle alone, as an admin keeps it.
	// +optional
	BundleEndpoint *BundleEndpoint `json:"bundleEndpoint,omitempty"`
}

// Profiles of a bundle endpoint (SPIFFE Federation).
const (
	// BundleProfileSPIFFE: the endpoint presents an X.509-SVID of the member trust domain, checked
	// against the bundle the hub already holds for it.
	BundleProfileSPIFFE = "https_spiffe"
	// BundleProfileWeb: the endpoint presents a Web PKI certificate for its host name.
	BundleProfileWeb = "https_web"
)

// BundleEndpoint is where and how the hub fetches a member's trust bundle.
//
// +kubebuilder:validation:XValidation:rule="self.profile != 'https_spiffe' || has(self.spiffeID)",message="spiffeID is required with profile https_spiffe (the identity the endpoint must present)"
// +kubebuilder:validation:XValidation:rule="self.profile != 'https_web' || !has(self.spiffeID)",message="spiffeID is for profile https_spiffe; an https_web endpoint is authenticated by its host name"
type BundleEndpoint struct {
	// URL of the endpoint; https only.
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') && isURL(self)",message="url must be an https:// URL"
	URL string `json:"url"`

	// Profile: https_spiffe (the default; SPIRE's bundle endpoint) or https_web.
	// +optional
	// +kubebuilder:default=https_spiffe
	// +kubebuilder:validation:Enum=https_spiffe;https_web
	Profile string `json:"profile,omitempty"`

	// SPIFFEID is the identity the endpoint must present (https_spiffe), in spec.trustDomain;
	// SPIRE's is spiffe://<trust domain>/spire/server.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	SPIFFEID string `json:"spiffeID,omitempty"`

	// RefreshInterval is how often the bundle is fetched; a bundle's spiffe_refresh_hint
	// shortens it (never below 30s). A failed fetch is retried after 30s.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30s')",message="refreshInterval must be at least 30s"
	RefreshInterval *metav1.Duration `json:"refreshInterval,omitempty"`
}

// FederatedClusterStatus is what the hub's leader saw of the member.
type FederatedClusterStatus struct {
	// observedGeneration and conditions: Ready, Connected, CardsAccepted.
	duck.Status `json:",inline"`
	// PeerSpiffeID is the identity the member's stream authenticated with.
	// +optional
	PeerSpiffeID string `json:"peerSpiffeID,omitempty"`
	// ClusterID is the member's About API cluster ID (cluster.clusterset.k8s.io), when it has one.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// LastSeen is when the hub last received a frame from the member (written at most every few
	// seconds while the member is connected).
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
	// Cards is the number of the member's cards the hub serves.
	// +optional
	Cards int32 `json:"cards"`
	// StaleCards is the number of served cards marked stale.
	// +optional
	StaleCards int32 `json:"staleCards"`
	// RefusedCards is the number of the member's current cards the hub refused.
	// +optional
	RefusedCards int32 `json:"refusedCards"`
	// Revision is the member's last revision the hub applied.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Refusals names up to 20 refused cards and why.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	Refusals []FederationRefusal `json:"refusals,omitempty"`
	// TrustBundle is the bundle the hub trusts for the member when it came from
	// spec.bundleEndpoint; absent while spec.trustBundle is in effect.
	// +optional
	TrustBundle *FederatedTrustBundle `json:"trustBundle,omitempty"`
}

// FederatedTrustBundle is a member bundle the hub fetched from its bundle endpoint. It is kept in
// the status so that a hub restart or a new leader goes on trusting it, not an outdated
// spec.trustBundle, until the next fetch.
type FederatedTrustBundle struct {
	// Seed is the SHA-256 of the spec.trustBundle the fetched bundle grew from: when
	// spec.trustBundle changes, the fetched bundle is dropped.
	// +kubebuilder:validation:MaxLength=64
	Seed string `json:"seed"`
	// RefreshedAt is when the bundle was fetched.
	RefreshedAt metav1.Time `json:"refreshedAt"`
	// SequenceNumber is the bundle's spiffe_sequence, when it has one.
	// +optional
	SequenceNumber *int64 `json:"sequenceNumber,omitempty"`
	// Authorities counts its X.509 authorities.
	Authorities int32 `json:"authorities"`
	// Bundle is the SPIFFE JSON bundle as fetched.
	// +kubebuilder:validation:MaxLength=262144
	Bundle string `json:"bundle"`
}

// FederationRefusal is one card the hub refused.
type FederationRefusal struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Reason is CamelCase, e.g. SignerOutsideTrustDomain, NamespaceNotOwned, UntrustedCertificateChain.
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// FederatedCluster registers a member cluster with the AgentCard federation hub. It lives on the
// hub only; members dial the hub, the hub never dials them.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=fc,categories=kagenti
// +kubebuilder:printcolumn:name="Trust Domain",type=string,JSONPath=`.spec.trustDomain`
// +kubebuilder:printcolumn:name="Connected",type=string,JSONPath=`.status.conditions[?(@.type=="Connected")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Cards",type=integer,JSONPath=`.status.cards`
// +kubebuilder:printcolumn:name="Stale",type=integer,JSONPath=`.status.staleCards`
// +kubebuilder:printcolumn:name="Refused",type=integer,JSONPath=`.status.refusedCards`
// +kubebuilder:printcolumn:name="Last Seen",type=date,JSONPath=`.status.lastSeen`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
type FederatedCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FederatedClusterSpec   `json:"spec"`
	Status FederatedClusterStatus `json:"status,omitempty"`
}

// GetStatus returns the status model shared by every Kagenti resource.
func (c *FederatedCluster) GetStatus() *duck.Status { return &c.Status.Status }

// +kubebuilder:object:root=true

// FederatedClusterList is a list of FederatedClusters.
type FederatedClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FederatedCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&FederatedCluster{}, &FederatedClusterList{})
}
