package controller

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/card"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/metrics"
	"github.com/kagenti/platform/agentcard/internal/signature"
)

// failureThreshold is how many syncs in a row a pod that served a good card may go unanswered
// before its entry reports the failure, like a probe's failureThreshold. A single slow answer
// (a busy node, a GC pause) would otherwise flip the entry, Synced and possibly Ready and back on
// the next sync: two status writes and two Events about nothing that changed. A pod that stops
// answering for good is still reported, and a pod that answers badly (404, 5xx, an invalid card)
// at once.
const failureThreshold = 3

// podState is what the controller remembers about one pod between syncs: the ETag and body of
// its last good answer (so a 304 costs no parsing) and the verification made for it.
type podState struct {
	uid  types.UID
	ip   string
	etag string
	path string
	url  string
	card *card.Card

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

	// result of the last reported sync
	fetchStatus string
	errMsg      string
	changedAt   time.Time
	createdAt   time.Time
}

// cardState is per AgentCard.
type cardState struct {
	mu   sync.Mutex
	pods map[string]*podState
}

// syncInput is what one pod fetch needs.
type syncInput struct {
	card           *v1alpha1.AgentCard
	pod            *corev1.Pod
	trustDomain    string
	requireSig     bool
	expectedIDSpec string
}

// syncPod fetches and verifies one pod's card, updating st in place. It never returns an error:
// every failure is recorded as the pod's fetchStatus.
func (r *CardReconciler) syncPod(ctx context.Context, st *podState, in syncInput) {
	p := in.pod
	scheme, port, paths := endpointFor(in.card, p)
	if st.uid != p.UID || st.ip != p.Status.PodIP || st.scheme != scheme || st.port != port || !slices.Equal(st.paths, paths) {
		*st = podState{uid: p.UID, ip: p.Status.PodIP, scheme: scheme, port: port, paths: paths, createdAt: p.CreationTimestamp.Time}
	}
	prevStatus, prevErr, prevHash := st.fetchStatus, st.errMsg, hashOf(st.card)
	defer func() {
		if st.fetchStatus != prevStatus || st.errMsg != prevErr || hashOf(st.card) != prevHash || st.changedAt.IsZero() {
			st.changedAt = time.Now()
		}
	}()

	start := time.Now()
	resp, err := r.Fetcher.Fetch(ctx, fetch.Request{Scheme: scheme, PodIP: p.Status.PodIP, Port: port, Paths: paths, ETag: st.etag, ETagPath: st.path})
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
		st.fetchStatus, st.errMsg, st.card, st.etag = v1alpha1.FetchFailed, err.Error(), nil, ""
		return
	}
	st.misses = 0
	st.url = resp.URL
	if resp.NotModified && st.card != nil {
		metrics.ObserveFetch("NotModified", time.Since(start))
	} else {
		st.etag, st.path = resp.ETag, resp.Path
		c, perr := card.Parse(resp.Body)
		if perr != nil {
			metrics.ObserveFetch("Invalid", time.Since(start))
			st.fetchStatus, st.errMsg, st.card, st.etag = v1alpha1.FetchInvalid, "invalid agent card: "+perr.Error(), nil, ""
			return
		}
		metrics.ObserveFetch("Success", time.Since(start))
		st.card = c
	}
	r.verifyPod(st, in)
	st.errMsg = ""
	st.fetchStatus = v1alpha1.FetchSuccess
	if in.requireSig && !(st.verify.Verified && st.binding.Bound) {
		st.fetchStatus = v1alpha1.FetchUnverified
		st.errMsg = st.verify.Message
		if st.verify.Verified {
			st.errMsg = st.binding.Message
		}
	}
}

// verifyPod verifies st.card unless the same card was verified for the same identity and bundle.
func (r *CardReconciler) verifyPod(st *podState, in syncInput) {
	expected, err := signature.ExpectedIdentity(in.expectedIDSpec, in.trustDomain, in.pod.Namespace, in.pod.Spec.ServiceAccountName)
	bundle, _ := r.Trust.Get()
	bundleHash := ""
	if bundle != nil {
		bundleHash = bundle.Hash
	}
	key := st.card.Hash + "|" + signaturesKey(st.card) + "|" + expected + "|" + in.trustDomain + "|" + bundleHash
	if key == st.verifiedFor {
		return
	}
	st.verify = (&signature.Verifier{Bundle: bundle}).Verify(st.card)
	metrics.ObserveVerification(st.verify.Verified, st.verify.Reason)
	if err != nil {
		st.binding = signature.BindingResult{Reason: signature.ReasonNoExpectedIdentity, Message: err.Error()}
	} else {
		st.binding = signature.Bind(st.verify, expected, in.trustDomain)
	}
	st.verifiedFor = key
}

func signaturesKey(c *card.Card) string {
	s := ""
	for _, sig := range c.Signatures {
		s += sig.Protected + "." + sig.Signature + ";"
	}
	return s
}

func hashOf(c *card.Card) string {
	if c == nil {
		return ""
	}
	return c.Hash
}
