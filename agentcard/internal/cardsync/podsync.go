package cardsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/card"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/intern"
	"github.com/kagenti/platform/agentcard/internal/metrics"
	"github.com/kagenti/platform/agentcard/internal/podcache"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/status"
	"github.com/kagenti/platform/agentcard/internal/verify"
)

// failureThreshold is how many syncs in a row a pod that served a good card may go unanswered
// before its entry reports the failure, like a probe's failureThreshold. A single slow answer
// (a busy node, a GC pause) would otherwise flip the entry, Synced and possibly Ready and back on
// the next sync: two status writes and two Events about nothing that changed. A pod that stops
// answering for good is still reported, and a pod that answers badly (404, 5xx, an invalid card)
// at once.
const failureThreshold = 3

// MaxStatusCardBytes bounds a card as written to status.card: its JSON encoding, where every <, >
// and & takes 6 bytes (\u003c), which is how the API server receives and stores it. Together with
// the bounded per-pod entries it keeps an AgentCard's status well below what the API server and
// etcd accept (3 MiB per request, 1.5 MiB per object by default).
const MaxStatusCardBytes = 256 << 10

// PodState is what the controller remembers about one pod between syncs: the ETag and a summary of
// its last good answer (so a 304 costs no parsing) and the verification made for it. Everything in
// it is bounded: the ETag by fetch.MaxETagBytes, messages by their cut, the card by the store.
type PodState struct {
	uid  types.UID
	ip   string
	etag string
	path string
	url  string
	card *cardSummary
	// over is how the card was fetched; peerID what the pod proved over mutual TLS.
	over, peerID string

	// The endpoint fetched: the last good answer only stands in for the same pod at the same one.
	scheme string
	port   int32
	paths  []string

	// The verification is reused while the card, the expected identity and the bundle are the same.
	verifiedFor string
	verify      signature.Result
	binding     signature.BindingResult

	// misses counts the unanswered fetches in a row that are not reported yet (see failureThreshold).
	misses int

	// result of the last reported sync; reason is the CamelCase cause of a failure.
	fetchStatus string
	reason      string
	errMsg      string
	changedAt   time.Time
	createdAt   time.Time
}

// cardSummary is what is kept of a pod's card between syncs; the parsed card itself is not.
type cardSummary struct {
	hash, name, version string
	// signatures identifies the card's signatures[] (a digest, whatever their size).
	signatures string
	// status is the card as status.card carries it. While the store holds it (heldKey != "") the
	// whole summary is shared with every pod serving the same body and never modified; otherwise
	// status lives for the sync that fetched it.
	status  []byte
	heldKey string
}

// verified is the pod's verdict: a card whose signature verifies and whose signer is bound.
func (s *PodState) verified() bool {
	return s.card != nil && s.verify.Verified && s.binding.Bound
}

// HasCard says whether the pod's last sync left it a valid card (so a verification).
func (s *PodState) HasCard() bool {
	return s.card != nil
}

// Verdict is the verification of the pod's card (meaningful when HasCard).
func (s *PodState) Verdict() verify.Verdict {
	return verify.Verdict{Signature: s.verify, Binding: s.binding}
}

// CardPods is the sync state of one AgentCard's pods.
type CardPods struct {
	mu   sync.Mutex
	pods map[string]*PodState
	// retries counts the quick retries made since the last sync without a fetch failure.
	retries int
}

// syncInput is what one pod fetch needs.
type syncInput struct {
	card           *v1alpha1.AgentCard
	pod            *podcache.Pod
	trustDomain    string
	requireSig     bool
	expectedIDSpec string
}

// syncPod fetches and verifies one pod's card, updating st in place. It never returns an error:
// every failure is recorded as the pod's fetchStatus.
func (r *Syncer) syncPod(ctx context.Context, st *PodState, in syncInput) {
	p := in.pod
	scheme, port, paths := podcache.Endpoint(in.card, p)
	if st.uid != p.UID || st.ip != p.IP || st.scheme != scheme || st.port != port || !slices.Equal(st.paths, paths) {
		r.dropCard(st)
		*st = PodState{uid: p.UID, ip: p.IP, scheme: scheme, port: port, paths: paths, createdAt: p.CreationTimestamp.Time}
	}
	prevStatus, prevErr, prevHash := st.fetchStatus, st.errMsg, hashOf(st.card)
	defer func() {
		if st.fetchStatus != prevStatus || st.errMsg != prevErr || hashOf(st.card) != prevHash || st.changedAt.IsZero() {
			st.changedAt = time.Now()
		}
	}()

	start := time.Now()
	req := fetch.Request{Scheme: scheme, PodIP: p.IP, Port: port, Paths: paths, ETag: st.etag, ETagPath: st.path}
	if r.Fetcher.Attests() {
		// Over mutual TLS the pod must prove the identity its card is bound to: an https endpoint
		// always, an http one when the pod answers that it accepts only mutual TLS (an authbridge
		// inbound with mtls.mode strict). Without that identity an http fetch goes on plain.
		id, idErr := r.Identities.ExpectedIdentity(in.expectedIDSpec, in.trustDomain, p.Namespace, p.ServiceAccount)
		if idErr != nil && scheme == "https" {
			r.fail(st, v1alpha1.FetchFailed, v1alpha1.ReasonPeerNotAttested, "no identity to require of the pod over mutual TLS: "+idErr.Message)
			return
		}
		if idErr == nil {
			req.PeerID = id
		}
	}
	resp, err := r.Fetcher.Fetch(ctx, req)
	if err != nil {
		metrics.ObserveFetch(fetch.KindOf(err), time.Since(start))
		if st.card != nil && fetch.NoAnswer(err) && st.misses+1 < failureThreshold {
			st.misses++
			return
		}
		var fe *fetch.Error
		if errors.As(err, &fe) {
			st.url = fe.URL
		}
		reason := v1alpha1.ReasonFetchFailed
		switch fetch.KindOf(err) {
		case "TooLarge":
			reason = v1alpha1.ReasonCardTooLarge
		case "PeerNotAttested":
			reason = v1alpha1.ReasonPeerNotAttested
		}
		r.fail(st, v1alpha1.FetchFailed, reason, err.Error())
		return
	}
	st.misses = 0
	st.url, st.over, st.peerID = resp.URL, resp.Over, resp.PeerID
	var parsed *card.Card
	if resp.NotModified && st.card != nil {
		metrics.ObserveFetch("NotModified", time.Since(start))
	} else if key := bodyKey(resp.Body); r.keepHeld(st, key, resp) {
		metrics.ObserveFetch("Success", time.Since(start))
	} else {
		pb := r.parseBody(key, resp.Body)
		metrics.ObserveFetch(pb.result, time.Since(start))
		if pb.fetchStatus != "" {
			r.fail(st, pb.fetchStatus, pb.reason, pb.message)
			return
		}
		r.keepCard(st, pb.card, pb.encoded, key, resp.ETag, resp.Path)
		parsed = pb.card
	}
	r.verifyPod(st, in, parsed)
	st.errMsg, st.reason = "", ""
	st.fetchStatus = v1alpha1.FetchSuccess
	if in.requireSig && !st.verified() {
		st.fetchStatus = v1alpha1.FetchUnverified
		st.errMsg = st.verify.Message
		if st.verify.Verified || st.binding.Reason != signature.ReasonNotVerified {
			st.errMsg = st.binding.Message
		}
	}
}

// fail records a reported failure: the pod has no card (and no verdict) any more.
func (r *Syncer) fail(st *PodState, fetchStatus, reason, msg string) {
	r.dropCard(st)
	st.over, st.peerID = "", ""
	st.fetchStatus, st.reason, st.errMsg = fetchStatus, reason, status.CutEncoded(msg, status.MaxEntryErrorBytes)
}

// keepHeld gives the pod the card the store holds for the body with key, if any: bytes already
// parsed (another pod serving the same card, or this one after its ETag was lost) cost a hash,
// not a parse.
func (r *Syncer) keepHeld(st *PodState, key string, resp *fetch.Response) bool {
	held, ok := r.cards.lookup(key)
	if !ok {
		return false
	}
	r.dropCard(st)
	st.card, st.etag, st.path = held, resp.ETag, resp.Path
	return true
}

// parsedBody is what parsing a served body gave: the card and the bytes status.card carries, or
// the failure to report (fetchStatus, reason, message). result is the fetch's metric label.
type parsedBody struct {
	card                         *card.Card
	encoded                      []byte
	result                       string
	fetchStatus, reason, message string
}

// parseBody parses a served body and encodes it as status.card carries it. Pods fetching the same
// bytes at the same time (the replicas of one Deployment in one sync) share one parse.
func (r *Syncer) parseBody(key string, body []byte) parsedBody {
	v, _, _ := r.parsing.Do(key, func() (any, error) {
		r.cards.countParse()
		c, err := card.Parse(body)
		if err != nil {
			return parsedBody{result: "Invalid", fetchStatus: v1alpha1.FetchInvalid, reason: v1alpha1.ReasonInvalidCard, message: "invalid agent card: " + err.Error()}, nil
		}
		// The bytes the status write will carry: numbers as served (the parser keeps them as
		// json.Number), <, > and & escaped as the API server will receive and store them.
		encoded, err := json.Marshal(c.Object)
		if err != nil {
			return parsedBody{result: "Invalid", fetchStatus: v1alpha1.FetchInvalid, reason: v1alpha1.ReasonInvalidCard, message: "invalid agent card: " + err.Error()}, nil
		}
		if len(encoded) > MaxStatusCardBytes {
			return parsedBody{result: "TooLarge", fetchStatus: v1alpha1.FetchFailed, reason: v1alpha1.ReasonCardTooLarge, message: fmt.Sprintf(
				"card is %d bytes JSON-encoded (each <, > and & takes 6), more than the %d an AgentCard status holds",
				len(encoded), MaxStatusCardBytes)}, nil
		}
		return parsedBody{card: c, encoded: encoded, result: "Success"}, nil
	})
	return v.(parsedBody)
}

// keepCard replaces the pod's card with c, parsed from the body with key, held in the store when
// the budget allows. A card the store cannot hold is not fetched conditionally next time (its ETag
// is dropped), so a 304 never has to stand for a card that is no longer there.
func (r *Syncer) keepCard(st *PodState, c *card.Card, encoded []byte, key, etag, path string) {
	r.dropCard(st)
	sum := &cardSummary{hash: c.Hash, name: status.CutEncoded(c.Name, status.MaxKeyIDBytes), version: status.CutEncoded(c.Version, status.MaxKeyIDBytes),
		signatures: signaturesDigest(c), status: encoded}
	st.etag, st.path = "", path
	if held, ok := r.cards.hold(key, sum); ok {
		sum = held
		st.etag = etag
	}
	st.card = sum
}

// dropCard forgets the pod's card, releasing it from the store.
func (r *Syncer) dropCard(st *PodState) {
	if st.card != nil {
		r.cards.release(st.card.heldKey)
	}
	st.card, st.etag = nil, ""
}

// releaseTransient drops the card bytes the store does not hold, once the sync that fetched them
// has written its status: the summary (hash, verdict) stays, the bytes do not.
func (st *PodState) releaseTransient() {
	if st.card != nil && st.card.heldKey == "" {
		st.card.status = nil
	}
}

// verifyPod verifies the pod's card unless the same card was verified for the same identity and
// bundle. parsed is the card when this sync fetched it, nil after a 304.
func (r *Syncer) verifyPod(st *PodState, in syncInput, parsed *card.Card) {
	id := verify.Identity{SpiffeID: in.expectedIDSpec, TrustDomain: in.trustDomain, Namespace: in.pod.Namespace, ServiceAccount: in.pod.ServiceAccount}
	bundle, _ := r.Trust.Get()
	bundleHash := ""
	if bundle != nil {
		bundleHash = bundle.Hash
	}
	// The verdict is a function of the card, its signatures, the identity and the bundle (the
	// identity rules are the process's): the same key, the same verdict.
	key := digest(st.card.hash, st.card.signatures, id.SpiffeID, id.TrustDomain, id.Namespace, id.ServiceAccount, bundleHash)
	if key == st.verifiedFor {
		return
	}
	var parseErr error
	// Pods serving the same card share one verification per bundle (the store's).
	st.verify = r.cards.verification(st.card.heldKey, bundleHash, func() (signature.Result, bool) {
		if parsed == nil {
			// A 304 for a card not verified under this bundle: parse the kept copy again. A kept
			// copy always exists here (a card the store could not hold has no ETag, so no 304).
			c, err := card.Parse(st.card.status)
			if err != nil {
				parseErr = err
				return signature.Result{}, false
			}
			parsed = c
		}
		v := boundedResult(verify.Signature(parsed, bundle, time.Time{}))
		metrics.ObserveVerification(v.Verified, v.Reason)
		return v, true
	})
	if parseErr != nil {
		st.verify = signature.Result{Reason: signature.ReasonMalformedSignature, Message: "cannot re-read the kept card: " + parseErr.Error()}
		st.binding = signature.BindingResult{Reason: signature.ReasonNotVerified, Message: "no verified signature"}
		st.verifiedFor = ""
		return
	}
	st.binding = verify.Bind(st.verify, id, r.Identities)
	// Every pod of a card and service account has the same expected identity, binding message and
	// key: they share one copy.
	st.binding.Expected, st.binding.Message = intern.String(st.binding.Expected), intern.String(st.binding.Message)
	st.verifiedFor = intern.String(key)
}

// boundedResult cuts what a verification result repeats from the card (kid, alg, messages quoting
// the protected header) before it is kept with the pod and written to status.
func boundedResult(v signature.Result) signature.Result {
	v.KeyID = status.CutEncoded(v.KeyID, status.MaxKeyIDBytes)
	v.Algorithm = status.CutEncoded(v.Algorithm, status.MaxKeyIDBytes)
	v.SpiffeID = status.CutEncoded(v.SpiffeID, status.MaxSpiffeIDBytes)
	v.Message = status.CutEncoded(v.Message, status.MaxMessageBytes)
	return v
}

// signaturesDigest identifies a card's signatures without keeping them.
func signaturesDigest(c *card.Card) string {
	h := sha256.New()
	for _, sig := range c.Signatures {
		h.Write([]byte(sig.Protected))
		h.Write([]byte{'.'})
		h.Write([]byte(sig.Signature))
		h.Write([]byte{';'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// digest hashes its parts (separated, so that no two lists of parts collide).
func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s|", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hashOf(c *cardSummary) string {
	if c == nil {
		return ""
	}
	return c.hash
}
