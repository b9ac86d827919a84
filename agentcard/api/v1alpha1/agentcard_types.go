package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kagenti/platform/pkg/duck"
)

// Phases of an AgentCard.
const (
	PhasePending = "Pending"
	PhaseActive  = "Active"
	PhaseError   = "Error"
)

// Condition types of an AgentCard: Ready (with Reconciling and Stalled, see duck.Status) is the
// summary; the others are agentcard's own. netpol owns NetworkPolicyReady on the same list.
const (
	// ConditionReady: a card is available and meets this AgentCard's requirements (signature and
	// identity binding when required).
	ConditionReady = duck.ConditionReady
	// ConditionSynced: every ready pod was fetched in the last sync.
	ConditionSynced = "Synced"
	// ConditionSignatureVerified: the card carries a valid signature chaining to the trust bundle.
	ConditionSignatureVerified = "SignatureVerified"
	// ConditionBound: the signer's SPIFFE ID equals the expected workload identity.
	ConditionBound = "Bound"
	// ConditionCardConsistent: every ready pod serves the same card.
	ConditionCardConsistent = "CardConsistent"
	// ConditionVerified is agentcard's verdict, the one every reader follows (netpol, the pod label):
	// True only when the card's signature verifies and its signer is the identity the card may
	// claim (Bound). Readers treat anything else, including a condition older than the AgentCard's
	// generation or none at all, as not verified.
	ConditionVerified = "Verified"
)

// Reasons of the Ready condition, and of Reconciling or Stalled next to it. Each is either
// Reconciling (the AgentCard gets there by itself: kstatus InProgress, Argo CD Progressing) or
// Stalled (nothing changes until someone changes the AgentCard, its workload or the card the pods
// serve: kstatus Failed, Argo CD Degraded). Target resolution adds duck.ReasonTargetNotFound
// (Reconciling: the workload may be created after the card, and its creation re-queues it),
// duck.ReasonUnsupportedKind and duck.ReasonInvalidTargetRef (Stalled).
const (
	// ReasonCardAvailable: Ready=True; a card is available and meets the AgentCard's requirements.
	ReasonCardAvailable = "CardAvailable"
	// ReasonNoReadyPods (Reconciling): no ready pod with an IP is selected (yet).
	ReasonNoReadyPods = "NoReadyPods"
	// ReasonNoValidCard (Reconciling): ready pods are selected and none answered with a valid card,
	// at least one because it could not be fetched (unreachable, an HTTP error): retried.
	ReasonNoValidCard = "NoValidCard"
	// ReasonInvalidCard (Stalled): every ready pod answered, and with a document that is not a
	// valid A2A agent card; the entries name the offending field.
	ReasonInvalidCard = "InvalidCard"
	// ReasonCardTooLarge (Stalled): a pod's card does not fit in the status (MaxStatusCardBytes once
	// JSON-encoded) or its answer exceeds the fetcher's bounds. Also a Synced and Verified reason.
	ReasonCardTooLarge = "CardTooLarge"
	// ReasonSignatureRequired (Stalled): a signature is required and the card has no valid one
	// chaining to the trust bundle; SignatureVerified says why.
	ReasonSignatureRequired = "SignatureRequired"
	// ReasonIdentityNotBound (Stalled): a signature is required and its signer is not the identity
	// the card may claim (a mismatch, or an identityBinding the controller does not allow); Bound
	// says why.
	ReasonIdentityNotBound = "IdentityNotBound"
	// ReasonInvalidSelector (Stalled): spec.selector is missing, empty or does not parse.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonStatusWriteFailed (Reconciling): the API server refused the status; a minimal status
	// withdrew the previous verdict and the sync is retried with backoff. Also a Verified reason.
	ReasonStatusWriteFailed = "StatusWriteFailed"
)

// Reasons of the other conditions; SignatureVerified and Bound (and Verified, which repeats the
// first cause) carry the verifier's reasons (NoSignature, UntrustedCertificateChain,
// IdentityMismatch, IdentityNotAllowed, ...; docs/agentcard.md lists them).
const (
	// ReasonVerified: the Verified condition is True.
	ReasonVerified = "Verified"
	// ReasonFetched (Synced=True): every ready pod answered with a valid card.
	ReasonFetched = "Fetched"
	// ReasonFetchFailed (Synced=False): a pod could not be fetched (unreachable, an HTTP error).
	ReasonFetchFailed = "FetchFailed"
	// ReasonPeerNotAttested (Synced=False): fetching over mutual TLS, the pod did not prove the
	// identity its card is bound to (no SVID, another identity, not trusted, expired).
	ReasonPeerNotAttested = "PeerNotAttested"
	// ReasonConsistent (CardConsistent=True): every ready pod serves the same card.
	ReasonConsistent = "Consistent"
	// ReasonCardsDiffer (CardConsistent=False): the pods serve different cards (a rollout).
	ReasonCardsDiffer = "CardsDiffer"
)

// Fetch results of one pod.
const (
	FetchSuccess    = "Success"
	FetchFailed     = "Failed"
	FetchInvalid    = "Invalid"
	FetchUnverified = "Unverified"
)

// Labels and annotations (docs/architecture.md §4).
const (
	// LabelSignatureVerified is patched onto pods (never templates): "true" or "false".
	LabelSignatureVerified = "kagenti.io/signature-verified"
	// LabelType on a workload: "agent" makes AgentCardSync create an AgentCard for it.
	LabelType = "kagenti.io/type"
	// AnnotationDiscovery on a workload: "disabled" opts out of auto-creation.
	AnnotationDiscovery = "kagenti.io/discovery"
)

// AgentCardSpec selects the pods serving an A2A agent card and says what a valid card must satisfy.
//
// +kubebuilder:validation:XValidation:rule="has(self.targetRef) != has(self.selector)",message="exactly one of spec.targetRef or spec.selector must be set"
type AgentCardSpec struct {
	// TargetRef names the workload (any PodSpecable kind) whose pods serve the card.
	// +optional
	TargetRef *duck.TargetRef `json:"targetRef,omitempty"`

	// Selector selects the pods serving the card by label, in this namespace.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// Endpoint says where on each pod the card is served.
	// +optional
	Endpoint *Endpoint `json:"endpoint,omitempty"`

	// SyncPeriod is how often every pod is fetched again (with jitter). Minimum 5s.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s')",message="syncPeriod must be at least 5s"
	SyncPeriod *metav1.Duration `json:"syncPeriod,omitempty"`

	// Metadata adds catalogue information the card itself does not carry.
	// +optional
	Metadata *CardMetadata `json:"metadata,omitempty"`

	// IdentityBinding requires the card's signer to be a given SPIFFE identity. When unset, the
	// controller's trust domain applies and the expected identity is the pod's own
	// spiffe://<trustDomain>/ns/<namespace>/sa/<serviceAccountName>.
	// +optional
	IdentityBinding *IdentityBinding `json:"identityBinding,omitempty"`

	// RequireSignature makes Ready depend on a verified, bound signature. Defaults to the
	// controller's --require-signature flag.
	// +optional
	RequireSignature *bool `json:"requireSignature,omitempty"`
}

// Endpoint is where a pod serves its agent card.
type Endpoint struct {
	// Path of the card. Default: /.well-known/agent-card.json, then /.well-known/agent.json on 404.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[^\s?#]*$`
	Path string `json:"path,omitempty"`

	// Port of the card. Default: the pod's container port named "a2a" or "http", else 8081.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// Scheme is http or https.
	// +optional
	// +kubebuilder:default=http
	// +kubebuilder:validation:Enum=http;https
	Scheme string `json:"scheme,omitempty"`
}

// CardMetadata is catalogue information kept next to the card.
type CardMetadata struct {
	// Name is a display name overriding the card's.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// Description overrides the card's description.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Description string `json:"description,omitempty"`
	// Tags are searchable with the discovery API's tag filter.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	Tags []string `json:"tags,omitempty"`
}

// IdentityBinding is the SPIFFE identity a card's signer must have.
type IdentityBinding struct {
	// TrustDomain the signer must belong to. Default: the controller's --trust-domain.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9._-]+$`
	TrustDomain string `json:"trustDomain,omitempty"`
	// SpiffeID the signer must have exactly. Default: spiffe://<trustDomain>/ns/<namespace>/sa/<pod serviceAccountName>.
	// It must be an identity of this AgentCard's namespace (spiffe://<trustDomain>/ns/<namespace>/...)
	// unless the controller's --cross-namespace-identities allows it (Bound=False, IdentityNotAllowed).
	// The schema checks the shape; the controller parses it (Bound=False, InvalidSpiffeID).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^spiffe://[a-z0-9._-]+(/[A-Za-z0-9._-]+)*$')",message="spiffeID must be a SPIFFE ID, spiffe://<trust domain>/<path>: a lower-case trust domain and path segments of letters, digits, '.', '_' and '-'"
	SpiffeID string `json:"spiffeID,omitempty"`
}

// AgentCardStatus is what the controller found on the pods.
type AgentCardStatus struct {
	// observedGeneration and conditions: Ready (the summary), Reconciling or Stalled (present only
	// while True), Synced, SignatureVerified, Bound, Verified, CardConsistent, and netpol's
	// NetworkPolicyReady.
	duck.Status `json:",inline"`
	// Phase is Pending (nothing fetched yet), Active (a card is cached) or Error.
	// +optional
	// +kubebuilder:validation:Enum=Pending;Active;Error
	Phase string `json:"phase,omitempty"`
	// LastSyncTime is when a sync last changed this status (idle syncs write nothing).
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// DiscoveredPods counts the ready pods selected.
	// +optional
	DiscoveredPods int32 `json:"discoveredPods"`
	// SyncErrors counts the pods whose last fetch did not yield a valid card.
	// +optional
	SyncErrors int32 `json:"syncErrors"`
	// Cards is one entry per ready pod.
	// +optional
	// +listType=map
	// +listMapKey=podName
	Cards []PodCard `json:"cards,omitempty"`
	// Card is the A2A agent card the ready pods serve (the newest when they differ).
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +mapType=atomic
	Card *runtime.RawExtension `json:"card,omitempty"`
	// CardHash is the SHA-256 of the card's RFC 8785 canonical form.
	// +optional
	CardHash string `json:"cardHash,omitempty"`
	// Signature is the verification result of Card.
	// +optional
	Signature *SignatureStatus `json:"signature,omitempty"`
	// Binding is the identity binding result of Card.
	// +optional
	Binding *BindingStatus `json:"binding,omitempty"`
}

// PodCard is the last fetch from one pod.
type PodCard struct {
	// PodName is the pod fetched.
	PodName string `json:"podName"`
	// PodIP is the address fetched.
	// +optional
	PodIP string `json:"podIP,omitempty"`
	// URL is the card's address on the pod.
	// +optional
	URL string `json:"url,omitempty"`
	// LastFetchTime is when the pod's result last changed.
	// +optional
	LastFetchTime *metav1.Time `json:"lastFetchTime,omitempty"`
	// FetchStatus is Success, Failed (unreachable, HTTP error, too large), Invalid (not an A2A card)
	// or Unverified (a card whose signature or binding fails while one is required).
	// +kubebuilder:validation:Enum=Success;Failed;Invalid;Unverified
	FetchStatus string `json:"fetchStatus"`
	// Error says what went wrong, naming the card field when the card is invalid.
	// +optional
	Error string `json:"error,omitempty"`
	// CardHash is the SHA-256 of the pod's card in canonical form.
	// +optional
	CardHash string `json:"cardHash,omitempty"`
	// FetchedOver is how the card was fetched: http, https (the server not authenticated: the
	// card's signature is what counts), or mtls (the controller presented its X.509-SVID and the pod
	// proved the identity the card is bound to, peerSpiffeID).
	// +optional
	// +kubebuilder:validation:Enum=http;https;mtls
	FetchedOver string `json:"fetchedOver,omitempty"`
	// PeerSpiffeID is the SPIFFE ID the pod proved over mutual TLS.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	PeerSpiffeID string `json:"peerSpiffeID,omitempty"`
}

// SignatureStatus is the result of verifying the card's JWS signatures.
type SignatureStatus struct {
	// Verified is true when one signature is valid and its x5c chain leads to the trust bundle.
	Verified bool `json:"verified"`
	// KeyID is the kid of the verified signature.
	// +optional
	KeyID string `json:"keyID,omitempty"`
	// SpiffeID is the signer's identity, from the leaf certificate's URI SAN.
	// +optional
	SpiffeID string `json:"spiffeID,omitempty"`
	// Algorithm is the JWS alg of the verified signature.
	// +optional
	Algorithm string `json:"algorithm,omitempty"`
	// Reason is a CamelCase cause when not verified, e.g. NoSignature, CertificateExpired.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message explains Reason.
	// +optional
	Message string `json:"message,omitempty"`
}

// BindingStatus is the result of comparing the signer with the expected identity.
type BindingStatus struct {
	// Bound is true when the signer's SPIFFE ID equals ExpectedSpiffeID.
	Bound bool `json:"bound"`
	// ExpectedSpiffeID is the identity the signer must have.
	// +optional
	ExpectedSpiffeID string `json:"expectedSpiffeID,omitempty"`
	// Reason is a CamelCase cause when not bound.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message explains Reason.
	// +optional
	Message string `json:"message,omitempty"`
}

// AgentCard discovers the A2A agent card served by a workload's pods, verifies its signature and
// identity, and caches it in status.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=card;cards,categories=kagenti
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.card.name`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.card.version`
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.discoveredPods`
// +kubebuilder:printcolumn:name="Verified",type=string,JSONPath=`.status.conditions[?(@.type=="Verified")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentCard struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AgentCardSpec `json:"spec"`
	// Status defaults to observedGeneration 0, so that tools read an AgentCard the controller has
	// not synced yet as in progress.
	// +kubebuilder:default={observedGeneration:0}
	Status AgentCardStatus `json:"status,omitempty"`
}

// GetStatus returns the status model shared by every Kagenti resource.
func (c *AgentCard) GetStatus() *duck.Status { return &c.Status.Status }

// GetTargetRef makes AgentCard a duck.Referrer; nil in selector mode.
func (c *AgentCard) GetTargetRef() *duck.TargetRef { return c.Spec.TargetRef }

// +kubebuilder:object:root=true

// AgentCardList is a list of AgentCards.
type AgentCardList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentCard `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentCard{}, &AgentCardList{})
}
