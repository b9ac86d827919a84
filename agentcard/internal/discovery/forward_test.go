package discovery_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/discovery"
	"github.com/kagenti/platform/agentcard/internal/federation/hub"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

// hubPod creates pod ns/name as a hub replica's (no kubelet here: its status is written as one
// would), with labels.
func hubPod(t *testing.T, ns, name, ip string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "kagenti-agentcard"}}}}
	require.NoError(t, k8s.Create(ctx, p))
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	require.NoError(t, k8s.Status().Update(ctx, p))
}

func leaderLabelOf(t *testing.T, ns, name string) string {
	t.Helper()
	var p corev1.Pod
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p))
	return p.Labels[v1alpha1.LabelFederationLeader]
}

// TestFollowerForwardsTheMembersCardsToTheLabelledLeader: the hub's leader labels its own pod
// kagenti.io/federation-leader=true once its endpoint serves, after taking the label off a
// previous leader's pod; a follower's discovery API forwards what only the leader holds (the
// members' cards) to the labelled pod, over TLS verified with the API's own CA, and the leader
// answers with the caller's token checked again. Stopping the leader takes its label off; with no
// leader labelled, or for a request already forwarded once, the follower answers 503.
func TestFollowerForwardsTheMembersCardsToTheLabelledLeader(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	port := freePort(t)
	serverName := "kagenti-agentcard-discovery." + ns + ".svc"

	// The leader's discovery API on 127.0.0.8, holding member a's card.
	leaderCerts := t.TempDir()
	writeServingCert(t, leaderCerts, serverName)
	cert, err := tls.LoadX509KeyPair(filepath.Join(leaderCerts, discovery.CertFile), filepath.Join(leaderCerts, discovery.KeyFile))
	require.NoError(t, err)
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.8:%d", port))
	require.NoError(t, err)
	leaderAPI := &httptest.Server{Listener: l, TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Config: &http.Server{Handler: &discovery.Server{Reader: k8s, LocalCluster: "hub", Authorizer: &discovery.KubeAuthorizer{Client: cs},
			Remote: &fakeCatalog{serving: true, cards: []discovery.RemoteCard{{Cluster: "a", Namespace: ns, Name: "weather", Card: testcards.Weather("1.0.0")}}}}}}
	leaderAPI.StartTLS()
	t.Cleanup(leaderAPI.Close)

	hubPod(t, ns, "hub-0", "127.0.0.8", nil)
	hubPod(t, ns, "hub-1", "127.0.0.9", nil)
	hubPod(t, ns, "hub-old", "127.0.0.10", map[string]string{v1alpha1.LabelFederationLeader: "true"}) // a previous leader

	// hub-0 wins the lease: once its endpoint serves, it labels itself.
	store := hub.NewStore(clock.RealClock{})
	lctx, stopLeader := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- (&hub.LeaderLabel{Client: k8s, Namespace: ns, Pod: "hub-0", Store: store, Log: logr.Discard(), Poll: 10 * time.Millisecond}).Start(lctx)
	}()
	assert.Empty(t, leaderLabelOf(t, ns, "hub-0"), "not before the endpoint serves")
	store.SetServing(true)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return leaderLabelOf(t, ns, "hub-0") == "true", nil
	}))
	assert.Empty(t, leaderLabelOf(t, ns, "hub-old"), "the previous leader's pod lost the label")
	assert.Empty(t, leaderLabelOf(t, ns, "hub-1"))

	// hub-1, a follower, serves the discovery API and forwards.
	followerCerts := t.TempDir()
	writeServingCert(t, followerCerts, "unused") // its own serving certificate is not under test
	require.NoError(t, copyFile(filepath.Join(leaderCerts, discovery.CAFile), filepath.Join(followerCerts, discovery.CAFile)), "both replicas hold the same CA")
	follower := httptest.NewServer(&discovery.Server{Reader: k8s, LocalCluster: "hub", Authorizer: &discovery.KubeAuthorizer{Client: cs},
		Remote: &fakeCatalog{serving: false},
		Leader: &discovery.LeaderForwarder{Reader: k8s, Namespace: ns, Self: "hub-1", Port: port, ServerName: serverName, CAFile: filepath.Join(followerCerts, discovery.CAFile)}})
	t.Cleanup(follower.Close)
	reader := token(t, ns, "reader")
	get := func(path string, header ...string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, follower.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+reader)
		if len(header) == 2 {
			req.Header.Set(header[0], header[1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var b json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&b)
		return resp.StatusCode, string(b)
	}

	code, body := get("/v1/agents?namespace=" + ns + "&cluster=a")
	require.Equal(t, http.StatusOK, code, body)
	var list discovery.AgentList
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Items, 1, body)
	assert.Equal(t, "a", list.Items[0].Cluster)
	code, body = get("/v1/agents/" + ns + "/weather?cluster=a")
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `"card"`)
	code, body = get("/v1/agents?namespace="+ns+"&cluster=a", discovery.ForwardedHeader, "hub-0")
	assert.Equal(t, http.StatusServiceUnavailable, code, "a request forwarded once is not forwarded again: %s", body)

	// The leader stops: its label goes, and the follower has nowhere to forward.
	stopLeader()
	require.NoError(t, <-done)
	assert.Empty(t, leaderLabelOf(t, ns, "hub-0"))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, _ := get("/v1/agents?namespace=" + ns + "&cluster=a")
		return code == http.StatusServiceUnavailable, nil // the leader's address is reused for 2 s
	}))
	_, body = get("/v1/agents?namespace=" + ns + "&cluster=a")
	assert.Contains(t, body, "no pod is labelled kagenti.io/federation-leader=true")
	code, _ = get("/v1/agents?namespace=" + ns + "&cluster=hub")
	assert.Equal(t, http.StatusOK, code, "the hub's own cards are served by every replica")
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// TestLeaderOutsideAPodLabelsNothing: a hub leader whose pod does not exist (run outside a
// cluster, or under another hostname without POD_NAME) says so once and stops trying; it does not
// keep the API server busy.
func TestLeaderOutsideAPodLabelsNothing(t *testing.T) {
	ns := newNamespace(t)
	store := hub.NewStore(clock.RealClock{})
	store.SetServing(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, (&hub.LeaderLabel{Client: k8s, Namespace: ns, Pod: "no-such-pod", Store: store, Log: logr.Discard()}).Start(ctx))
	require.NoError(t, ctx.Err(), "Start returned before its context ended")
}

// TestTheLeaderLimitsForwardedRequestsByTheirClient: a follower forwards the members' cards to
// the leader with the original client's address, and the leader's per-client rate limit counts
// each client on its own: two clients through one follower get a budget each. The leader believes
// that address only from a replica, one that presents the discovery API's serving certificate: a
// client that names another client itself, with no certificate or with a certificate of its own
// for the API's name, is still counted by its own address and gets no extra budget.
func TestTheLeaderLimitsForwardedRequestsByTheirClient(t *testing.T) {
	ns := newNamespace(t)
	port := freePort(t)
	serverName := "kagenti-agentcard-discovery." + ns + ".svc"
	const burst = 3 // and one request per 1000 s after it: the counts below do not depend on timing

	// The leader's discovery API on 127.0.0.8, as Setup serves it.
	leaderCerts := t.TempDir()
	caPEM := writeServingCert(t, leaderCerts, serverName)
	cert, err := tls.LoadX509KeyPair(filepath.Join(leaderCerts, discovery.CertFile), filepath.Join(leaderCerts, discovery.KeyFile))
	require.NoError(t, err)
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.8:%d", port))
	require.NoError(t, err)
	leaderAPI := &httptest.Server{Listener: l,
		TLS: discovery.ServingTLSConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }),
		Config: &http.Server{Handler: &discovery.Server{Reader: k8s, LocalCluster: "hub", Authorizer: &discovery.KubeAuthorizer{Client: cs},
			Limiter:  discovery.NewClientLimiter(0.001, burst, 0),
			Replicas: &discovery.ReplicaVerifier{CAFile: filepath.Join(leaderCerts, discovery.CAFile), ServerName: serverName},
			Remote:   &fakeCatalog{serving: true, cards: []discovery.RemoteCard{{Cluster: "a", Namespace: ns, Name: "weather", Card: testcards.Weather("1.0.0")}}}}}}
	leaderAPI.StartTLS()
	t.Cleanup(leaderAPI.Close)
	hubPod(t, ns, "hub-0", "127.0.0.8", map[string]string{v1alpha1.LabelFederationLeader: "true"})

	// The follower holds the same Secret: CA, serving certificate and key.
	followerCerts := t.TempDir()
	for _, f := range []string{discovery.CAFile, discovery.CertFile, discovery.KeyFile} {
		require.NoError(t, copyFile(filepath.Join(leaderCerts, f), filepath.Join(followerCerts, f)))
	}
	follower := httptest.NewServer(&discovery.Server{Reader: k8s, LocalCluster: "hub", Authorizer: &discovery.KubeAuthorizer{Client: cs},
		Remote: &fakeCatalog{serving: false},
		Leader: &discovery.LeaderForwarder{Reader: k8s, Namespace: ns, Self: "hub-1", Port: port, ServerName: serverName,
			CAFile: filepath.Join(followerCerts, discovery.CAFile), CertFile: filepath.Join(followerCerts, discovery.CertFile), KeyFile: filepath.Join(followerCerts, discovery.KeyFile)}})
	t.Cleanup(follower.Close)

	reader := token(t, ns, "reader")
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	// from is a client on source address ip (loopback) with the given client certificates.
	from := func(ip string, certs ...tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{
			DialContext:     (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext,
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName, Certificates: certs, MinVersion: tls.VersionTLS12},
		}}
	}
	get := func(c *http.Client, url string, header ...string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url+"/v1/agents?namespace="+ns+"&cluster=a", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+reader)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	codes := func(c *http.Client, url string, n int, header ...string) []int {
		out := make([]int, n)
		for i := range out {
			out[i], _ = get(c, url, header...)
		}
		return out
	}
	budget := append(all(http.StatusOK, burst), http.StatusTooManyRequests)

	// Two clients through the follower: each its own budget at the leader, and the leader names
	// the client it limits. A client's own header does not survive the follower.
	a, b := from("127.0.0.2"), from("127.0.0.3")
	assert.Equal(t, budget, codes(a, follower.URL, burst+1, discovery.ForwardedForHeader, "127.0.0.99"), "client 127.0.0.2 through the follower")
	code, body := get(a, follower.URL)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, body, "too many requests from 127.0.0.2")
	assert.Equal(t, budget, codes(b, follower.URL, burst+1), "client 127.0.0.3 through the follower: a budget of its own")

	// Directly at the leader, a client naming other clients itself is counted by its own address.
	c := from("127.0.0.4")
	var named []int
	for i := range burst + 1 {
		code, _ := get(c, leaderAPI.URL, discovery.ForwardedForHeader, fmt.Sprintf("127.0.1.%d", i), discovery.ForwardedHeader, "hub-1")
		named = append(named, code)
	}
	assert.Equal(t, budget, named, "a client setting %s itself", discovery.ForwardedForHeader)
	code, body = get(c, leaderAPI.URL, discovery.ForwardedForHeader, "127.0.0.5")
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, body, "too many requests from 127.0.0.4")

	// Nor with a certificate for the API's name from a CA of its own.
	own := t.TempDir()
	writeServingCert(t, own, serverName)
	ownCert, err := tls.LoadX509KeyPair(filepath.Join(own, discovery.CertFile), filepath.Join(own, discovery.KeyFile))
	require.NoError(t, err)
	d := from("127.0.0.6", ownCert)
	assert.Equal(t, budget, codes(d, leaderAPI.URL, burst+1, discovery.ForwardedForHeader, "127.0.0.7"), "a client with a certificate of another CA")
	code, body = get(d, leaderAPI.URL, discovery.ForwardedForHeader, "127.0.0.7")
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, body, "too many requests from 127.0.0.6")
}
