package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

// An AgentCard binds only identities of its own namespace: pods in "atk" replaying the card that
// "payments" signed, with spec.identityBinding.spiffeID naming payments' identity, are not bound,
// not labelled verified. An identity the administrator allows (--cross-namespace-identities, here
// spiffe://cluster.local/ns/shared-*/sa/*) binds from any namespace.
func TestIdentityBindingStaysInItsNamespace(t *testing.T) {
	atk := newNamespace(t)
	ctx := context.Background()
	payments := "spiffe://cluster.local/ns/payments/sa/payments-agent"
	serveCard(t, "127.44.4.1", signedCard(t, ca, payments, "1.0.0"))
	makePod(t, atk, "replay", "127.44.4.1", "attacker", map[string]string{"app": "replay"})
	require.NoError(t, k8s.Create(ctx, selectorCard(atk, "replay", map[string]string{"app": "replay"}, func(c *v1alpha1.AgentCard) {
		c.Spec.IdentityBinding = &v1alpha1.IdentityBinding{SpiffeID: payments}
	})))

	shared := "spiffe://cluster.local/ns/shared-tools/sa/search"
	serveCard(t, "127.44.4.2", signedCard(t, ca, shared, "1.0.0"))
	makePod(t, atk, "shared", "127.44.4.2", "shared", map[string]string{"app": "shared"})
	require.NoError(t, k8s.Create(ctx, selectorCard(atk, "shared", map[string]string{"app": "shared"}, func(c *v1alpha1.AgentCard) {
		c.Spec.IdentityBinding = &v1alpha1.IdentityBinding{SpiffeID: shared}
	})))

	// Parsed with go-spiffe, not by prefix: the schema's shape check admits this one, the
	// controller does not.
	serveCard(t, "127.44.4.3", signedCard(t, ca, "spiffe://cluster.local/ns/"+atk+"/sa/dots", "1.0.0"))
	makePod(t, atk, "dots", "127.44.4.3", "dots", map[string]string{"app": "dots"})
	require.NoError(t, k8s.Create(ctx, selectorCard(atk, "dots", map[string]string{"app": "dots"}, func(c *v1alpha1.AgentCard) {
		c.Spec.IdentityBinding = &v1alpha1.IdentityBinding{SpiffeID: "spiffe://cluster.local/ns/" + atk + "/sa/../dots"}
	})))

	eventually(t, 30*time.Second, func() string {
		r, s, d := getCard(t, atk, "replay"), getCard(t, atk, "shared"), getCard(t, atk, "dots")
		got := fmt.Sprintf("replay Bound=%s label=%s; shared Bound=%s label=%s; dots Bound=%s",
			cond(r, "Bound"), podLabel(t, atk, "replay"), cond(s, "Bound"), podLabel(t, atk, "shared"), cond(d, "Bound"))
		want := "replay Bound=False/IdentityNotAllowed label=false; shared Bound=True/Bound label=true; dots Bound=False/InvalidSpiffeID"
		if got != want {
			return got
		}
		return ""
	})
	r := getCard(t, atk, "replay")
	assert.True(t, r.Status.Signature.Verified, "the replayed signature itself is valid")
	assert.Contains(t, r.Status.Binding.Message, "namespace payments")
	assert.Contains(t, r.Status.Binding.Message, atk)
	assert.Contains(t, r.Status.Binding.Message, "--cross-namespace-identities")
	assert.Equal(t, "False/IdentityNotAllowed", cond(r, "Verified"))
	assert.Contains(t, getCard(t, atk, "dots").Status.Binding.Message, "spec.identityBinding.spiffeID")

	// The schema refuses what is not even shaped like a SPIFFE ID.
	err := k8s.Create(ctx, selectorCard(atk, "upper", map[string]string{"app": "x"}, func(c *v1alpha1.AgentCard) {
		c.Spec.IdentityBinding = &v1alpha1.IdentityBinding{SpiffeID: "spiffe://UP PER/../x"}
	}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.identityBinding.spiffeID")
}

// A pod sending an ETag longer than the fetcher keeps still gets its card verified and cached; it
// just never gets a conditional GET. Headers beyond the bound are refused and reported.
func TestOversizedETagIsNotKept(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	body := testcards.Weather("1.0.0")
	var conditional, full atomic.Int32
	etag := `"` + strings.Repeat("7", fetch.MaxETagBytes*4) + `"`
	serveOn(t, "127.44.5.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") != "" {
			conditional.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		full.Add(1)
		_, _ = w.Write(body)
	}))
	makePod(t, ns, "etag", "127.44.5.1", "", map[string]string{"app": "etag"})
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "etag", map[string]string{"app": "etag"})))

	// 64 KiB of headers: net/http's own default (10 MiB) would read them all.
	bigETag := `"` + strings.Repeat("7", 64<<10) + `"`
	serveOn(t, "127.44.5.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", bigETag)
		_, _ = w.Write(body)
	}))
	makePod(t, ns, "headers", "127.44.5.2", "", map[string]string{"app": "headers"})
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "headers", map[string]string{"app": "headers"})))

	eventually(t, 40*time.Second, func() string {
		if n := full.Load(); n < 3 {
			return fmt.Sprintf("%d full fetches so far", n)
		}
		c := getCard(t, ns, "etag")
		if cond(c, "Ready") != "True/CardAvailable" {
			return "Ready=" + cond(c, "Ready")
		}
		h := getCard(t, ns, "headers")
		if e := entry(h, "headers"); e == nil || e.FetchStatus != v1alpha1.FetchFailed || !strings.Contains(e.Error, "response headers larger than") {
			return fmt.Sprintf("headers entry %+v", e)
		}
		return ""
	})
	assert.Zero(t, conditional.Load(), "an ETag of %d bytes must not be sent back", len(etag))
	assert.Equal(t, "False/CardTooLarge", cond(getCard(t, ns, "headers"), "Synced"))
}
