package discovery

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
)

// ForwardedHeader names the hub replica that forwarded a request to the leader; a request that
// carries it is never forwarded again.
const ForwardedHeader = "Kagenti-Forwarded-By"

// ForwardedForHeader carries, on a forwarded request, the address of the client that sent it to
// the follower: the leader rate-limits the request by it. The leader believes it only from another
// replica (ReplicaVerifier); from anyone else it is ignored.
const ForwardedForHeader = "Kagenti-Forwarded-For"

// leaderTTL is how long the leader's address is reused before the pods are asked again.
const leaderTTL = 2 * time.Second

// LeaderForwarder sends what a follower of the federation hub cannot answer, the member clusters'
// cards (the leader alone holds them), to the leader's pod: the pod of Namespace labelled
// v1alpha1.LabelFederationLeader, on Port, over TLS verified with the discovery API's own CA
// (CAFile) under ServerName. The caller's token goes along and the leader checks it again; the
// leader's answer is passed back as it is. The follower proves it is a replica of the API by
// presenting the API's serving certificate (CertFile, KeyFile) as its client certificate, so that the
// leader counts the request against the original client's rate limit (ForwardedForHeader).
type LeaderForwarder struct {
	// Reader lists the pods (the API server's: the label is read nowhere else).
	Reader    client.Reader
	Namespace string
	// Self is this replica's pod, never the leader it forwards to.
	Self       string
	Port       int
	ServerName string
	CAFile     string
	// CertFile and KeyFile are the discovery API's serving certificate and key, which every replica
	// holds (re-read at each new connection: they rotate).
	CertFile, KeyFile string

	mu      sync.Mutex
	leader  string // host:port
	expires time.Time
	proxy   *httputil.ReverseProxy
}

func (f *LeaderForwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	addr, proxy, err := f.target(r)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "this replica is not the federation hub's leader and holds no member cluster's agents, and cannot reach the leader: "+err.Error()+"; retry")
		return
	}
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = "https", addr, f.ServerName, ""
	out.Header.Set(ForwardedHeader, f.Self)
	out.Header.Set(ForwardedForHeader, clientAddress(r)) // replaces whatever the client sent
	proxy.ServeHTTP(w, out)
}

// target returns the leader's address and the proxy to it, asking the API server at most every
// leaderTTL.
func (f *LeaderForwarder) target(r *http.Request) (string, *httputil.ReverseProxy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader != "" && time.Now().Before(f.expires) {
		return f.leader, f.proxy, nil
	}
	var pods corev1.PodList
	if err := f.Reader.List(r.Context(), &pods, client.InNamespace(f.Namespace), client.MatchingLabels{v1alpha1.LabelFederationLeader: "true"}); err != nil {
		return "", nil, err
	}
	leader := ""
	for _, p := range pods.Items {
		if p.Name != f.Self && p.DeletionTimestamp == nil && p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning {
			leader = net.JoinHostPort(p.Status.PodIP, strconv.Itoa(f.Port))
		}
	}
	if leader == "" {
		return "", nil, errors.New("no pod is labelled " + v1alpha1.LabelFederationLeader + "=true")
	}
	if f.proxy == nil {
		ca, err := os.ReadFile(f.CAFile)
		if err != nil {
			return "", nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return "", nil, fmt.Errorf("%s holds no certificate", f.CAFile)
		}
		f.proxy = &httputil.ReverseProxy{
			Rewrite: func(*httputil.ProxyRequest) {}, // the request is addressed in ServeHTTP
			Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: f.ServerName, MinVersion: tls.VersionTLS12,
					GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
						c, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
						if err != nil {
							return nil, fmt.Errorf("the discovery API's serving certificate, presented to the leader: %w", err)
						}
						return &c, nil
					}},
				ForceAttemptHTTP2:   true,
				TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: 30 * time.Second, IdleConnTimeout: time.Minute,
			},
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
				f.mu.Lock()
				f.leader = "" // ask again next time
				f.mu.Unlock()
				w.Header().Set("Retry-After", "1")
				writeError(w, http.StatusServiceUnavailable, "forwarding to the federation hub's leader: "+err.Error()+"; retry")
			},
		}
	}
	f.leader, f.expires = leader, time.Now().Add(leaderTTL)
	return f.leader, f.proxy, nil
}
