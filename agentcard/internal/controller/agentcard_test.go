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
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/testcards"
	"github.com/kagenti/platform/pkg/duck"
)

func signedCard(t *testing.T, signer *devca.CA, id, version string) []byte {
	t.Helper()
	svid, err := signer.NewSVID(id, devca.SVIDOptions{})
	require.NoError(t, err)
	b, err := signature.Sign(testcards.Weather(version), signature.SignOptions{Key: svid.Key, Chain: svid.Chain})
	require.NoError(t, err)
	return b
}

func selectorCard(ns, name string, labels map[string]string, mutate ...func(*v1alpha1.AgentCard)) *v1alpha1.AgentCard {
	c := &v1alpha1.AgentCard{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentCardSpec{
			Selector:   &metav1.LabelSelector{MatchLabels: labels},
			SyncPeriod: &metav1.Duration{Duration: 5 * time.Second},
		},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func cond(c *v1alpha1.AgentCard, t string) string {
	x := meta.FindStatusCondition(c.Status.Conditions, t)
	if x == nil {
		return "<none>"
	}
	return string(x.Status) + "/" + x.Reason
}

func entry(c *v1alpha1.AgentCard, pod string) *v1alpha1.PodCard {
	for i := range c.Status.Cards {
		if c.Status.Cards[i].PodName == pod {
			return &c.Status.Cards[i]
		}
	}
	return nil
}

func TestValidationRejectsBadSpecs(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	both := selectorCard(ns, "both", map[string]string{"a": "b"}, func(c *v1alpha1.AgentCard) {
		c.Spec.TargetRef = &duck.TargetRef{Kind: "Deployment", Name: "x"}
	})
	err := k8s.Create(ctx, both)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exactly one of spec.targetRef or spec.selector")
	short := selectorCard(ns, "short", map[string]string{"a": "b"}, func(c *v1alpha1.AgentCard) {
		c.Spec.SyncPeriod = &metav1.Duration{Duration: time.Second}
	})
	err = k8s.Create(ctx, short)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.syncPeriod")
	assert.Contains(t, err.Error(), "at least 5s")
	badID := selectorCard(ns, "badid", map[string]string{"a": "b"}, func(c *v1alpha1.AgentCard) {
		c.Spec.IdentityBinding = &v1alpha1.IdentityBinding{SpiffeID: "http://x"}
	})
	err = k8s.Create(ctx, badID)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.identityBinding.spiffeID")
}

// Two pods serving the same signed card: per-pod entries, verified and bound signature, pod labels,
// conditional GETs, and no status writes while nothing changes.
func TestSelectorModeSignedCardETagAndIdleWrites(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	id := "spiffe://cluster.local/ns/" + ns + "/sa/weather-agent"
	body := signedCard(t, ca, id, "1.0.0")
	s1 := serveCard(t, "127.42.1.1", body)
	s2 := serveCard(t, "127.42.1.2", body)
	labels := map[string]string{"app": "weather"}
	makePod(t, ns, "weather-1", "127.42.1.1", "weather-agent", labels)
	makePod(t, ns, "weather-2", "127.42.1.2", "weather-agent", labels)
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "weather", labels, func(c *v1alpha1.AgentCard) { c.Spec.RequireSignature = ptr(true) })))

	eventually(t, 20*time.Second, func() string {
		c := getCard(t, ns, "weather")
		if cond(c, "Ready") != "True/CardAvailable" || len(c.Status.Cards) != 2 {
			return fmt.Sprintf("Ready=%s cards=%d %+v", cond(c, "Ready"), len(c.Status.Cards), c.Status.Conditions)
		}
		return ""
	})
	c := getCard(t, ns, "weather")
	assert.Equal(t, v1alpha1.PhaseActive, c.Status.Phase)
	assert.EqualValues(t, 2, c.Status.DiscoveredPods)
	assert.EqualValues(t, 0, c.Status.SyncErrors)
	for _, p := range []string{"weather-1", "weather-2"} {
		e := entry(c, p)
		require.NotNil(t, e, p)
		assert.Equal(t, v1alpha1.FetchSuccess, e.FetchStatus)
		assert.Equal(t, c.Status.CardHash, e.CardHash)
		assert.True(t, strings.HasSuffix(e.URL, fmt.Sprintf(":%d/.well-known/agent-card.json", cardPort)), e.URL)
	}
	require.NotNil(t, c.Status.Signature)
	assert.True(t, c.Status.Signature.Verified, c.Status.Signature.Message)
	assert.Equal(t, id, c.Status.Signature.SpiffeID)
	assert.Equal(t, "ES256", c.Status.Signature.Algorithm)
	require.NotNil(t, c.Status.Binding)
	assert.True(t, c.Status.Binding.Bound)
	assert.Equal(t, id, c.Status.Binding.ExpectedSpiffeID)
	assert.Equal(t, "True/Verified", cond(c, "SignatureVerified"))
	assert.Equal(t, "True/Bound", cond(c, "Bound"))
	assert.Equal(t, "True/Consistent", cond(c, "CardConsistent"))
	assert.Equal(t, "True/Fetched", cond(c, "Synced"))
	assert.Contains(t, string(c.Status.Card.Raw), `"Weather Intelligence Agent"`)

	eventually(t, 10*time.Second, func() string {
		for _, n := range []string{"weather-1", "weather-2"} {
			var p corev1.Pod
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &p))
			if p.Labels[v1alpha1.LabelSignatureVerified] != "true" {
				return n + " not labelled"
			}
		}
		return ""
	})

	// Idle: later syncs get 304 Not Modified and write nothing.
	rv := getCard(t, ns, "weather").ResourceVersion
	before := s1.notModified.Load() + s2.notModified.Load()
	eventually(t, 20*time.Second, func() string {
		if n := s1.notModified.Load() + s2.notModified.Load(); n < before+4 {
			return fmt.Sprintf("%d conditional GETs answered 304 so far", n-before)
		}
		return ""
	})
	assert.Equal(t, rv, getCard(t, ns, "weather").ResourceVersion, "an idle sync must not write the status")
	assert.EqualValues(t, 1, s1.ok.Load(), "the body is transferred once, then 304")

	// A pod serving a new version: CardConsistent=False naming the pod; the newest pod wins.
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has second resolution
	newer := signedCard(t, ca, id, "2.0.0")
	serveCard(t, "127.42.1.3", newer)
	makePod(t, ns, "weather-3", "127.42.1.3", "weather-agent", labels)
	eventually(t, 20*time.Second, func() string {
		c := getCard(t, ns, "weather")
		if cond(c, "CardConsistent") != "False/CardsDiffer" {
			return "CardConsistent=" + cond(c, "CardConsistent")
		}
		if !strings.Contains(string(c.Status.Card.Raw), `"2.0.0"`) {
			return "card is not the newest pod's"
		}
		return ""
	})
	msg := meta.FindStatusCondition(getCard(t, ns, "weather").Status.Conditions, "CardConsistent").Message
	assert.Contains(t, msg, "weather-1, weather-2")
}

// Failures are per pod: a slow pod times out without holding the others, oversized, non-JSON,
// invalid and redirecting pods are reported with what is wrong.
func TestPerPodFailures(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	labels := map[string]string{"app": "mixed"}
	serveCard(t, "127.42.2.1", testcards.Weather("1.0.0"))
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	serveOn(t, "127.42.2.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		case <-r.Context().Done():
		}
	}))
	serveOn(t, "127.42.2.3", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"name":"` + strings.Repeat("x", fetch.MaxBodyBytes) + `"}`))
	}))
	serveOn(t, "127.42.2.4", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("<html>hello</html>"))
	}))
	serveOn(t, "127.42.2.5", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"name":"x","version":"1"}`))
	}))
	serveOn(t, "127.42.2.6", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://example.com/card.json", http.StatusFound)
	}))
	for i, n := range []string{"good", "slow", "big", "html", "invalid", "redirect"} {
		makePod(t, ns, n, fmt.Sprintf("127.42.2.%d", i+1), "", labels)
	}
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "mixed", labels)))
	eventually(t, 20*time.Second, func() string {
		c := getCard(t, ns, "mixed")
		if len(c.Status.Cards) != 6 {
			return fmt.Sprintf("%d entries", len(c.Status.Cards))
		}
		return ""
	})
	c := getCard(t, ns, "mixed")
	want := map[string][2]string{
		"good":     {v1alpha1.FetchSuccess, ""},
		"slow":     {v1alpha1.FetchFailed, "no answer within 5s"},
		"big":      {v1alpha1.FetchFailed, fmt.Sprintf("larger than %d bytes", fetch.MaxBodyBytes)},
		"html":     {v1alpha1.FetchInvalid, "not a JSON object"},
		"invalid":  {v1alpha1.FetchInvalid, "capabilities: required"},
		"redirect": {v1alpha1.FetchFailed, "redirect"},
	}
	for pod, w := range want {
		e := entry(c, pod)
		require.NotNil(t, e, pod)
		assert.Equal(t, w[0], e.FetchStatus, pod+": "+e.Error)
		assert.Contains(t, e.Error, w[1], pod)
	}
	assert.EqualValues(t, 5, c.Status.SyncErrors)
	assert.Equal(t, "True/CardAvailable", cond(c, "Ready"), "one good pod is enough when no signature is required")
	assert.Equal(t, "False/CardTooLarge", cond(c, "Synced"), "the first failed pod (by name) is the oversized one")
	assert.Equal(t, "False/NoSignature", cond(c, "SignatureVerified"))
	// An unsigned card without a signature requirement has nothing to verify, and a pod without a
	// card had nothing verified: no pod gets the label (before, every one was labelled false).
	consistently(t, 3*time.Second, func() string {
		for pod := range want {
			if l := podLabel(t, ns, pod); l != "<unset>" {
				return pod + " labelled " + l
			}
		}
		return ""
	})
}

// consistently fails the test if f reports a problem (a non-empty string) within d: what must not
// happen after a sync that was seen to complete (a write that would follow it).
func consistently(t *testing.T, d time.Duration, f func() string) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if msg := f(); msg != "" {
			t.Fatal(msg)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// A pod that misses one fetch (a timeout under load) and answers the next one has not changed:
// nothing is written. A pod that stops answering is still reported after a few syncs.
func TestUnansweredFetchWritesNothingUntilItPersists(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	body := testcards.Weather("1.0.0")
	var hangOnce, hangAll atomic.Bool
	var hung, notModified, notModifiedAtHang atomic.Int32
	serveOn(t, "127.42.7.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hangOnce.CompareAndSwap(true, false) || hangAll.Load() {
			notModifiedAtHang.Store(notModified.Load())
			hung.Add(1)
			<-r.Context().Done() // until the controller's fetch timeout gives up
			return
		}
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write(body)
	}))
	labels := map[string]string{"app": "flaky"}
	makePod(t, ns, "flaky", "127.42.7.1", "", labels)
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "flaky", labels)))
	eventually(t, 20*time.Second, func() string {
		if n := notModified.Load(); n < 1 {
			return "no idle sync yet"
		}
		c := getCard(t, ns, "flaky")
		if got := cond(c, "Ready") + " " + cond(c, "Synced"); got != "True/CardAvailable True/Fetched" {
			return got
		}
		return ""
	})
	rv := getCard(t, ns, "flaky").ResourceVersion

	// The sync after the unanswered one got a 304 and the one after that proves it has finished,
	// so any write about the miss or the recovery has happened by then.
	hangOnce.Store(true)
	eventually(t, 30*time.Second, func() string {
		if hung.Load() == 0 || notModified.Load() < notModifiedAtHang.Load()+2 {
			return fmt.Sprintf("unanswered %d, 304s since %d", hung.Load(), notModified.Load()-notModifiedAtHang.Load())
		}
		return ""
	})
	c := getCard(t, ns, "flaky")
	assert.Equal(t, rv, c.ResourceVersion, "one unanswered fetch must not write the status (Synced=%s)", cond(c, "Synced"))

	hangAll.Store(true)
	eventually(t, 60*time.Second, func() string {
		c := getCard(t, ns, "flaky")
		e := entry(c, "flaky")
		if e == nil || e.FetchStatus != v1alpha1.FetchFailed || cond(c, "Synced") != "False/FetchFailed" {
			return fmt.Sprintf("Synced=%s entry=%+v", cond(c, "Synced"), e)
		}
		assert.Contains(t, e.Error, "no answer within 5s")
		return ""
	})
	assert.GreaterOrEqual(t, hung.Load(), int32(1+3), "reported only after failureThreshold unanswered fetches in a row")
}

// targetRef mode: a Deployment's pods, the default port from the "a2a" container port, scale-down,
// recovery from TargetNotFound, identity binding on the pod's service account, and the label on
// pods only (the template and generation stay untouched).
func TestTargetRefModeBindingAndScaleDown(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	card := &v1alpha1.AgentCard{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "travel"},
		Spec: v1alpha1.AgentCardSpec{TargetRef: &duck.TargetRef{Kind: "Deployment", Name: "travel"},
			SyncPeriod: &metav1.Duration{Duration: 5 * time.Second}},
	}
	require.NoError(t, k8s.Create(ctx, card))
	eventually(t, 10*time.Second, func() string {
		if c := getCard(t, ns, "travel"); cond(c, "Ready") != "False/TargetNotFound" || c.Status.Phase != v1alpha1.PhasePending {
			return cond(c, "Ready")
		}
		return ""
	})

	labels := map[string]string{"app": "travel"}
	id := "spiffe://cluster.local/ns/" + ns + "/sa/travel"
	serveCard(t, "127.42.3.1", signedCard(t, ca, id, "1.0.0"))
	serveCard(t, "127.42.3.2", signedCard(t, ca, id, "1.0.0"))
	makePod(t, ns, "travel-a", "127.42.3.1", "travel", labels)
	makePod(t, ns, "travel-b", "127.42.3.2", "travel", labels)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "travel"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}}},
		},
	}
	require.NoError(t, k8s.Create(ctx, dep))
	gen := dep.Generation
	eventually(t, 20*time.Second, func() string {
		c := getCard(t, ns, "travel")
		if cond(c, "Ready") != "True/CardAvailable" || len(c.Status.Cards) != 2 || cond(c, "Bound") != "True/Bound" {
			return fmt.Sprintf("Ready=%s Bound=%s cards=%d", cond(c, "Ready"), cond(c, "Bound"), len(c.Status.Cards))
		}
		return ""
	})
	eventually(t, 10*time.Second, func() string {
		var p corev1.Pod
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "travel-a"}, &p))
		if p.Labels[v1alpha1.LabelSignatureVerified] != "true" {
			return "not labelled"
		}
		return ""
	})
	var d appsv1.Deployment
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(dep), &d))
	assert.Equal(t, gen, d.Generation, "the workload is never modified")
	assert.NotContains(t, d.Spec.Template.Labels, v1alpha1.LabelSignatureVerified)

	// Scale-down: the pod's entry goes away.
	require.NoError(t, k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "travel-b"}}, client.GracePeriodSeconds(0)))
	eventually(t, 20*time.Second, func() string {
		c := getCard(t, ns, "travel")
		if len(c.Status.Cards) != 1 || c.Status.DiscoveredPods != 1 || entry(c, "travel-a") == nil {
			return fmt.Sprintf("cards=%v", c.Status.Cards)
		}
		return ""
	})

	// Agent A presenting agent B's card: a pod with another service account is not bound.
	makePod(t, ns, "impostor", "127.42.3.3", "impostor", labels)
	serveCard(t, "127.42.3.3", signedCard(t, ca, id, "1.0.0"))
	eventually(t, 20*time.Second, func() string {
		var p corev1.Pod
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "impostor"}, &p))
		if p.Labels[v1alpha1.LabelSignatureVerified] != "false" {
			return "impostor label=" + p.Labels[v1alpha1.LabelSignatureVerified]
		}
		return ""
	})
}

// requireSignature: an unsigned card is not Ready; a card signed for another identity is not Ready.
func TestRequireSignature(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	serveCard(t, "127.42.4.1", testcards.Weather("1"))
	makePod(t, ns, "unsigned", "127.42.4.1", "a", map[string]string{"app": "unsigned"})
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "unsigned", map[string]string{"app": "unsigned"}, func(c *v1alpha1.AgentCard) { c.Spec.RequireSignature = ptr(true) })))

	serveCard(t, "127.42.4.2", signedCard(t, ca, "spiffe://cluster.local/ns/"+ns+"/sa/someone-else", "1"))
	makePod(t, ns, "wrongsa", "127.42.4.2", "a", map[string]string{"app": "wrongsa"})
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "wrongsa", map[string]string{"app": "wrongsa"}, func(c *v1alpha1.AgentCard) { c.Spec.RequireSignature = ptr(true) })))

	eventually(t, 20*time.Second, func() string {
		u, w := getCard(t, ns, "unsigned"), getCard(t, ns, "wrongsa")
		if cond(u, "Ready") != "False/SignatureRequired" || cond(w, "Ready") != "False/IdentityNotBound" {
			return cond(u, "Ready") + " " + cond(w, "Ready")
		}
		return ""
	})
	w := getCard(t, ns, "wrongsa")
	assert.Equal(t, "False/IdentityMismatch", cond(w, "Bound"))
	assert.Equal(t, v1alpha1.FetchUnverified, w.Status.Cards[0].FetchStatus)
	assert.Equal(t, v1alpha1.PhaseError, w.Status.Phase)
	// Both verifications failed: an unsigned card that must be signed, a signer that is not the pod.
	eventually(t, 10*time.Second, func() string {
		if u, w := podLabel(t, ns, "unsigned"), podLabel(t, ns, "wrongsa"); u != "false" || w != "false" {
			return fmt.Sprintf("labels: unsigned=%s wrongsa=%s", u, w)
		}
		return ""
	})
}

// A card signed by a CA the bundle does not hold verifies once the bundle ConfigMap is rotated to
// include it, without any change to the AgentCard.
func TestTrustBundleRotation(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	ca2, err := devca.NewCA("cluster.local", time.Hour)
	require.NoError(t, err)
	id := "spiffe://cluster.local/ns/" + ns + "/sa/rot"
	serveCard(t, "127.42.5.1", signedCard(t, ca2, id, "1"))
	makePod(t, ns, "rot", "127.42.5.1", "rot", map[string]string{"app": "rot"})
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "rot", map[string]string{"app": "rot"}, func(c *v1alpha1.AgentCard) {
		c.Spec.SyncPeriod = &metav1.Duration{Duration: time.Hour} // only the rotation can trigger the re-verification
	})))
	eventually(t, 20*time.Second, func() string {
		if c := getCard(t, ns, "rot"); cond(c, "SignatureVerified") != "False/UntrustedCertificateChain" {
			return cond(c, "SignatureVerified")
		}
		return ""
	})
	var cm corev1.ConfigMap
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: bundleNS, Name: bundleName}, &cm))
	orig := cm.Data["bundle.crt"]
	cm.Data["bundle.crt"] = orig + string(devca.CertPEM(ca2.Cert))
	require.NoError(t, k8s.Update(ctx, &cm))
	t.Cleanup(func() {
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: bundleNS, Name: bundleName}, &cm))
		cm.Data["bundle.crt"] = orig
		_ = k8s.Update(ctx, &cm)
	})
	eventually(t, 20*time.Second, func() string {
		if c := getCard(t, ns, "rot"); cond(c, "SignatureVerified") != "True/Verified" {
			return cond(c, "SignatureVerified")
		}
		return ""
	})
}
