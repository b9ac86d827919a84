package discovery_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/discovery"
)

// burst sends n requests at once and returns their status codes.
func (a *api) burst(t *testing.T, path, token string, n int) []int {
	t.Helper()
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			req, _ := http.NewRequest(http.MethodGet, a.url+path, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := a.client.Do(req)
			if err != nil {
				t.Logf("request %d: %v", i, err)
				codes[i] = -1
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	close(start)
	wg.Wait()
	return codes
}

func all(code, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = code
	}
	return out
}

// A burst of requests with one token costs one TokenReview and one SubjectAccessReview; the next
// burst costs none; an invalid token is remembered too.
func TestOneReviewPerTokenForABurst(t *testing.T) {
	ns := newNamespace(t)
	a := startAPI(t, discovery.Options{})
	a.waitServing(t)
	reader := token(t, ns, "reader")
	const n = 50

	assert.Equal(t, all(http.StatusOK, n), a.burst(t, "/v1/agents?namespace="+ns, reader, n))
	assert.EqualValues(t, 1, a.reviews.tokenReviews.Load(), "TokenReviews for a burst of %d", n)
	assert.EqualValues(t, 1, a.reviews.accessReviews.Load(), "SubjectAccessReviews for a burst of %d", n)

	assert.Equal(t, all(http.StatusOK, n), a.burst(t, "/v1/agents?namespace="+ns, reader, n))
	assert.EqualValues(t, 1, a.reviews.tokenReviews.Load(), "a second burst is answered from the cache")
	assert.EqualValues(t, 1, a.reviews.accessReviews.Load())

	resp, _ := a.get(t, "/v1/agents/"+ns+"/weather", reader)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.EqualValues(t, 1, a.reviews.tokenReviews.Load(), "another access with a known token: no TokenReview")
	assert.EqualValues(t, 2, a.reviews.accessReviews.Load(), "but one SubjectAccessReview")

	assert.Equal(t, all(http.StatusUnauthorized, n), a.burst(t, "/v1/agents?namespace="+ns, "not-a-token", n))
	assert.EqualValues(t, 2, a.reviews.tokenReviews.Load(), "an invalid token is reviewed once")

	stranger := token(t, ns, "stranger")
	assert.Equal(t, all(http.StatusForbidden, n), a.burst(t, "/v1/agents?namespace="+ns, stranger, n))
	assert.EqualValues(t, 3, a.reviews.tokenReviews.Load())
	assert.EqualValues(t, 3, a.reviews.accessReviews.Load(), "a denied access is reviewed once")
}

// Each client address gets its own token bucket; beyond it the answer is 429 with Retry-After,
// before any TokenReview: junk tokens from one client cost at most its burst in reviews.
func TestRateLimitPerClient(t *testing.T) {
	ns := newNamespace(t)
	// One request per 1000 s after a burst of 5: the count below does not depend on timing.
	a := startAPI(t, discovery.Options{RateLimit: 0.001, RateBurst: 5})
	a.waitServing(t)
	a.reviews.tokenReviews.Store(0) // waitServing's /healthz is not limited and costs no review

	limited := 0
	for i := range 100 {
		resp, body := a.get(t, "/v1/agents?namespace="+ns, fmt.Sprintf("junk-%d", i))
		switch resp.StatusCode {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			limited++
			secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
			assert.Greater(t, secs, 0)
			assert.Contains(t, body, "too many requests")
		default:
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	assert.Equal(t, 95, limited, "requests beyond the burst of 5")
	assert.EqualValues(t, 5, a.reviews.tokenReviews.Load(), "100 junk tokens cost only the burst in TokenReviews")

	// Another client address (127.0.0.2 on loopback) has its own bucket.
	other := a.client.Transport.(*http.Transport).Clone()
	other.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext
	b := &api{url: a.url, client: &http.Client{Transport: other}}
	resp, _ := b.get(t, "/v1/agents?namespace="+ns, token(t, ns, "reader"))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// With --discovery-audience, only tokens issued for that audience are accepted (TokenReview
// spec.audiences); without it, tokens for the API server's own audience are, and an
// audience-bound token is not.
func TestAudienceBoundTokens(t *testing.T) {
	ns := newNamespace(t)
	bound := token(t, ns, "reader", "kagenti-agentcard")
	apiServer := token(t, ns, "reader")
	other := token(t, ns, "reader", "some-other-service")
	path := "/v1/agents?namespace=" + ns

	withAudience := startAPI(t, discovery.Options{Audiences: []string{"kagenti-agentcard"}})
	withAudience.waitServing(t)
	resp, body := withAudience.get(t, path, bound)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	resp, _ = withAudience.get(t, path, apiServer)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a token for the API server")
	resp, _ = withAudience.get(t, path, other)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a token for another audience")

	withoutAudience := startAPI(t, discovery.Options{})
	withoutAudience.waitServing(t)
	resp, _ = withoutAudience.get(t, path, apiServer)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = withoutAudience.get(t, path, bound)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a token bound to an audience the API server does not have")
}

// The API is served over TLS only; a client verifies it with the CA published in the ConfigMap.
func TestTLSWithTheCAFromTheConfigMap(t *testing.T) {
	ns := newNamespace(t)
	a := startAPI(t, discovery.Options{Namespace: ns, CAConfigMap: "discovery-ca"})
	a.waitServing(t)

	cm := waitConfigMap(t, ns, "discovery-ca")
	verified := &api{url: a.url, client: httpsClient(t, []byte(cm.Data["ca.crt"]))}
	resp, body := verified.get(t, "/v1/agents?namespace="+ns, token(t, ns, "reader"))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.NotNil(t, resp.TLS)
	assert.True(t, resp.TLS.HandshakeComplete)

	_, err := http.Get(a.url + "/healthz")
	require.Error(t, err, "a client that does not trust the CA")
	assert.Contains(t, err.Error(), "certificate signed by unknown authority")

	plain, err := http.Get(strings.Replace(a.url, "https://", "http://", 1) + "/v1/agents")
	require.NoError(t, err)
	plain.Body.Close()
	assert.Equal(t, http.StatusBadRequest, plain.StatusCode, "plain HTTP gets no API answer")

	old := &tls.Config{MaxVersion: tls.VersionTLS11, RootCAs: verified.client.Transport.(*http.Transport).TLSClientConfig.RootCAs}
	_, err = (&http.Client{Transport: &http.Transport{TLSClientConfig: old}}).Get(a.url + "/healthz")
	assert.Error(t, err, "TLS below 1.2")
}

// Without a certificate directory, the rotator issues the certificate for the Service into the
// shipped Secret; the API serves once the Syncer has written it (readiness follows), clients verify it by the
// Service's name with the published CA. It all runs as the controller's ServiceAccount with the
// shipped RBAC.
func TestRotatorCertificate(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	secret := &corev1.Secret{}
	readShipped(t, "deploy/kustomize/agentcard/secret.yaml", secret)
	secret.Namespace = ns
	require.NoError(t, k8s.Create(ctx, secret))

	certDir := t.TempDir()
	a := startAPIAs(t, discovery.Options{
		Namespace: ns, RotatorCertDir: certDir, CertSecret: secret.Name,
		ServiceName: "kagenti-agentcard-discovery", CAConfigMap: "kagenti-agentcard-discovery-ca",
		RotatorName: "rotator-" + ns, // controller names are unique per process
	}, grantShippedRBAC(t, ns))

	cm := waitConfigMap(t, ns, "kagenti-agentcard-discovery-ca")
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(secret), secret))
	assert.Equal(t, string(secret.Data["ca.crt"]), cm.Data["ca.crt"], "the published CA is the rotator's")
	a.client = httpsClient(t, []byte(cm.Data["ca.crt"]))
	a.client.Transport.(*http.Transport).TLSClientConfig.ServerName = "kagenti-agentcard-discovery." + ns + ".svc"
	a.waitServing(t)
	assert.Equal(t, http.StatusOK, a.readyz(t))
	resp, body := a.get(t, "/v1/agents/"+ns+"/weather", token(t, ns, "reader"))
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
}

// A valid token and an allowed access are remembered for TTL but never past the token's expiry;
// an invalid token and a denied access for NegativeTTL; each cache holds MaxEntries tokens.
func TestAuthCacheLifetimes(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	counter := &reviewCounter{}
	cfg := rest.CopyConfig(restCfg)
	cfg.WrapTransport = counter.wrap
	clock := testingclock.NewFakeClock(time.Now())
	k := &discovery.KubeAuthorizer{Client: kubernetes.NewForConfigOrDie(cfg), TTL: 24 * time.Hour, NegativeTTL: 5 * time.Second, MaxEntries: 2, Clock: clock}
	list := discovery.Access{Verb: "list", Namespace: ns}

	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "reader", tokenRequest(3600), metav1.CreateOptions{})
	require.NoError(t, err)
	reader := tr.Status.Token
	authorize := func(tok string) bool {
		_, allowed, err := k.Authorize(ctx, tok, list)
		require.NoError(t, err)
		return allowed
	}
	require.True(t, authorize(reader))
	clock.Step(59 * time.Minute)
	require.True(t, authorize(reader))
	assert.EqualValues(t, 1, counter.tokenReviews.Load(), "within the token's validity")
	assert.EqualValues(t, 1, counter.accessReviews.Load())
	clock.SetTime(tr.Status.ExpirationTimestamp.Add(time.Second))
	authorize(reader) // the API server's clock has not moved: still valid there
	assert.EqualValues(t, 2, counter.tokenReviews.Load(), "past the token's expiry the TTL of a day does not apply")
	assert.EqualValues(t, 2, counter.accessReviews.Load())

	require.False(t, authorize("junk"))
	clock.Step(4 * time.Second)
	require.False(t, authorize("junk"))
	assert.EqualValues(t, 3, counter.tokenReviews.Load(), "an invalid token is remembered for NegativeTTL")
	clock.Step(2 * time.Second)
	require.False(t, authorize("junk"))
	assert.EqualValues(t, 4, counter.tokenReviews.Load(), "and then reviewed again")

	// Minted for longer than the fake clock has moved ahead of the API server's.
	tr, err = cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "stranger", tokenRequest(4*3600), metav1.CreateOptions{})
	require.NoError(t, err)
	stranger := tr.Status.Token
	require.False(t, authorize(stranger))
	clock.Step(4 * time.Second)
	require.False(t, authorize(stranger))
	assert.EqualValues(t, 3, counter.accessReviews.Load(), "a denied access is remembered for NegativeTTL")
	clock.Step(2 * time.Second)
	require.False(t, authorize(stranger))
	assert.EqualValues(t, 4, counter.accessReviews.Load())

	// MaxEntries 2: the reader's token was the least recently used of three, so it was forgotten.
	before := counter.tokenReviews.Load()
	require.True(t, authorize(reader))
	assert.Equal(t, before+1, counter.tokenReviews.Load(), "the cache is bounded")
}

// A list's summaries are bounded whatever the cards hold; the full card stays available.
func TestSummariesAreBounded(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	skills := make([]any, 400)
	for i := range skills {
		skills[i] = map[string]any{"id": fmt.Sprintf("skill-%d", i), "name": strings.Repeat("n", 100), "description": strings.Repeat("d", 2000), "tags": []any{fmt.Sprintf("t%d", i)}}
	}
	raw, err := json.Marshal(map[string]any{"name": strings.Repeat("N", 5000), "description": strings.Repeat("D", 50000), "url": "http://a", "capabilities": map[string]any{}, "skills": skills})
	require.NoError(t, err)
	c := &v1alpha1.AgentCard{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "weather"}, c))
	c.Status.Card = &k8sruntime.RawExtension{Raw: raw}
	require.NoError(t, k8s.Status().Update(ctx, c))

	a := startAPI(t, discovery.Options{AllowAnonymous: true})
	a.waitServing(t)
	var page discovery.AgentList
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		resp, body := a.get(t, "/v1/agents?namespace="+ns, "")
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		page = discovery.AgentList{}
		require.NoError(t, json.Unmarshal([]byte(body), &page))
		return len(page.Items) == 1 && page.Items[0].AgentName != "", nil
	}))
	s := page.Items[0]
	b, _ := json.Marshal(s)
	assert.LessOrEqual(t, len(b), discovery.MaxSummaryBytes)
	assert.True(t, s.Truncated)
	assert.NotEmpty(t, s.Skills)
	assert.Less(t, len(s.Skills), len(skills))
	assert.Less(t, len(s.AgentName), 300)

	resp, body := a.get(t, "/v1/agents/"+ns+"/weather", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var one discovery.Agent
	require.NoError(t, json.Unmarshal([]byte(body), &one))
	assert.JSONEq(t, string(raw), string(one.Card), "GET of one agent returns the whole card")
}

func tokenRequest(seconds int64) *authnv1.TokenRequest {
	return &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
}

func waitConfigMap(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm)
		return err == nil && cm.Data["ca.crt"] != "", nil
	}), "ConfigMap %s/%s with ca.crt", ns, name)
	return cm
}

func readShipped(t *testing.T, path string, into any) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "../../..", path))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, into), path)
}
