package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/pkg/configmap/certfiles"
)

// The rotator keeps the serving certificate in a Secret of the controller's namespace, and the CA
// is published for clients in a ConfigMap there. Creating a ConfigMap cannot be limited to a name;
// changing one is limited to the CA's.
// +kubebuilder:rbac:groups="",namespace=kagenti-system,resources=secrets,verbs=list;watch
// +kubebuilder:rbac:groups="",namespace=kagenti-system,resources=secrets,resourceNames=kagenti-agentcard-discovery-cert,verbs=update
// +kubebuilder:rbac:groups="",namespace=kagenti-system,resources=configmaps,verbs=create
// +kubebuilder:rbac:groups="",namespace=kagenti-system,resources=configmaps,resourceNames=kagenti-agentcard-discovery-ca,verbs=get;update;patch

// Files of a certificate directory, as cert-manager and the rotator's Secret provide them.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// Options configure the discovery API.
type Options struct {
	// BindAddress is where it listens; "" or "0" disables the API.
	BindAddress string
	// AllowAnonymous turns authentication and authorization off.
	AllowAnonymous bool
	// Audiences the bearer tokens must be issued for (empty: the API server's own).
	Audiences []string
	// CertDir, when set, holds tls.crt and tls.key provided from outside (e.g. cert-manager) and
	// disables the built-in rotator. Otherwise RotatorCertDir is where the rotator's Secret
	// CertSecret (in Namespace) is mounted; its certificate is issued for ServiceName.Namespace.svc
	// plus ExtraDNSNames.
	CertDir        string
	RotatorCertDir string
	CertSecret     string
	ServiceName    string
	Namespace      string
	ExtraDNSNames  []string
	// RotatorName names the rotator's controller (unique per process; its metrics carry it).
	// Default: kagenti-agentcard-discovery-cert-rotator.
	RotatorName string
	// CAConfigMap, when set, is the ConfigMap (in Namespace) the CA (ca.crt of the certificate
	// directory) is published in, for clients to verify the server with.
	CAConfigMap string
	// RateLimit is the number of requests per second each client address may make, with bursts
	// of RateBurst; 0 turns the limit off.
	RateLimit float64
	RateBurst int
	// TrustDomain is the SPIFFE trust domain of the workloads: a requester's SPIFFE ID, for
	// ?access= and ?callable=, is spiffe://<TrustDomain>/ns/<namespace>/sa/<service account>.
	TrustDomain string
	// Policies turns on "which agents may I call" (?access=, ?callable=): the API watches the
	// {workload}-token-exchange ConfigMaps, which needs ClusterRole kagenti-agentcard-policyreader.
	Policies bool
	// AuthCacheTTL and AuthNegativeCacheTTL: see KubeAuthorizer.TTL and NegativeTTL.
	AuthCacheTTL, AuthNegativeCacheTTL time.Duration
	// Remote and LocalCluster: on a federation hub, the members' cards and this cluster's name
	// (internal/federation sets them).
	Remote       RemoteCatalog
	LocalCluster string
	// Pod, on a hub, is this replica's pod: a follower forwards what only the leader holds to the
	// pod labelled v1alpha1.LabelFederationLeader in Namespace (LeaderForwarder). Empty: a
	// follower answers 503.
	Pod string
}

// Setup adds the discovery API to mgr: its TLS server, which runs on every replica (it only reads
// the cache) once a certificate is in place, a readiness check that passes once it serves, and,
// without CertDir, the certificate rotator.
func Setup(mgr ctrl.Manager, o Options) error {
	if o.BindAddress == "" || o.BindAddress == "0" {
		return nil
	}
	handler := &Server{Reader: mgr.GetClient(), Remote: o.Remote, LocalCluster: o.LocalCluster, Calls: &MetricsScraper{}}
	if o.Remote != nil && o.Pod != "" {
		_, port, err := net.SplitHostPort(o.BindAddress)
		if err != nil {
			return fmt.Errorf("discovery bind address %q: %w", o.BindAddress, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return fmt.Errorf("discovery bind address %q: %w", o.BindAddress, err)
		}
		certDir := o.CertDir
		if certDir == "" {
			certDir = o.RotatorCertDir
		}
		serverName := o.ServiceName + "." + o.Namespace + ".svc"
		handler.Leader = &LeaderForwarder{Reader: mgr.GetAPIReader(), Namespace: o.Namespace, Self: o.Pod, Port: p,
			ServerName: serverName, CAFile: filepath.Join(certDir, CAFile),
			CertFile: filepath.Join(certDir, CertFile), KeyFile: filepath.Join(certDir, KeyFile)}
		handler.Replicas = &ReplicaVerifier{CAFile: filepath.Join(certDir, CAFile), ServerName: serverName}
	}
	if o.RateLimit > 0 {
		handler.Limiter = NewClientLimiter(o.RateLimit, o.RateBurst, DefaultMaxClients)
	}
	if !o.AllowAnonymous {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return err
		}
		handler.Authorizer = &KubeAuthorizer{Client: cs, Audiences: o.Audiences, TTL: o.AuthCacheTTL, NegativeTTL: o.AuthNegativeCacheTTL}
		// The agents' policies, for ?access= and ?callable=: only with an authenticated requester,
		// and only when turned on (it needs to read ConfigMaps cluster-wide).
		if o.Policies {
			policies := NewPolicies(cs)
			if err := mgr.Add(policies); err != nil {
				return err
			}
			handler.Policies, handler.TrustDomain = policies, o.TrustDomain
		}
	}
	srv := &tlsServer{
		address: o.BindAddress, handler: handler, certDir: o.CertDir, anonymous: o.AllowAnonymous,
		certReady: make(chan struct{}), serving: make(chan struct{}),
		warmUp: func(ctx context.Context) error { return waitForAgentCards(ctx, mgr.GetCache()) },
	}
	if o.CertDir != "" {
		close(srv.certReady)
	} else {
		srv.certDir = o.RotatorCertDir
		if err := addRotator(mgr, o, srv.certReady); err != nil {
			return err
		}
	}
	if err := mgr.Add(srv); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("discovery-api", srv.readyz); err != nil {
		return err
	}
	if o.CAConfigMap == "" {
		return nil
	}
	return mgr.Add(&caPublisher{
		client: mgr.GetClient(), key: types.NamespacedName{Namespace: o.Namespace, Name: o.CAConfigMap},
		caFile: filepath.Join(srv.certDir, CAFile), certReady: srv.certReady, interval: caPublishInterval,
	})
}

func addRotator(mgr ctrl.Manager, o Options, ready chan struct{}) error {
	if o.Namespace == "" || o.CertSecret == "" || o.ServiceName == "" || o.RotatorCertDir == "" {
		return errors.New("the discovery API's certificate rotator needs its namespace, Secret, Service name and certificate directory (or give a certificate directory from outside)")
	}
	err := certfiles.Rotation{Namespace: o.Namespace, Secret: o.CertSecret, Dir: o.RotatorCertDir,
		// ca.crt too: the CA publisher reads it from the directory (CAFile).
		Keys:        append([]string{CAFile}, certfiles.ServingKeys...),
		ServiceName: o.ServiceName, ExtraDNSNames: o.ExtraDNSNames,
		CAName: "kagenti-agentcard-discovery-ca", FieldOwner: "kagenti-agentcard",
		Name: cmp.Or(o.RotatorName, "kagenti-agentcard-discovery-cert-rotator"),
		// The rotator closes it once the certificate files are in RotatorCertDir (written by the Syncer).
		Ready: ready,
	}.Add(mgr, mgr.GetLogger())
	if err != nil {
		return fmt.Errorf("setting up the discovery API's certificate rotator: %w", err)
	}
	return nil
}

// tlsServer serves the discovery API over TLS with the certificate in certDir, reloaded when the
// files change (a rotated Secret, a renewed cert-manager certificate).
type tlsServer struct {
	address   string
	handler   http.Handler
	certDir   string
	anonymous bool
	// warmUp runs before the server listens (the cache it answers from must be in sync).
	warmUp func(context.Context) error
	// certReady is closed once the certificate files exist; serving once the server listens.
	certReady chan struct{}
	serving   chan struct{}
}

func (s *tlsServer) NeedLeaderElection() bool { return false }

func (s *tlsServer) readyz(*http.Request) error {
	select {
	case <-s.serving:
		return nil
	default:
		return errors.New("the discovery API does not serve yet: waiting for its certificate")
	}
}

func (s *tlsServer) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("discovery")
	select {
	case <-s.certReady:
	case <-ctx.Done():
		return nil
	}
	if err := s.warmUp(ctx); err != nil {
		return err
	}
	watcher, err := certwatcher.New(filepath.Join(s.certDir, CertFile), filepath.Join(s.certDir, KeyFile))
	if err != nil {
		return fmt.Errorf("discovery API certificate: %w", err)
	}
	go func() {
		if err := watcher.Start(ctx); err != nil {
			logger.Error(err, "watching the discovery API certificate failed; it is no longer reloaded")
		}
	}()
	ln, err := net.Listen("tcp", s.address)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           s.handler,
		TLSConfig:         ServingTLSConfig(watcher.GetCertificate),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		// Failed handshakes (scanners, clients without the CA) are not the server's errors.
		ErrorLog: stdlog.New(debugWriter{logger}, "", 0),
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info("discovery API listening (TLS)", "address", ln.Addr().String(), "certDir", s.certDir, "anonymous", s.anonymous)
	close(s.serving)
	if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// waitForAgentCards starts the cache's AgentCard informer (the controller's own watch starts it
// too, but the API must not answer from an empty cache before then) and waits until it is in sync.
func waitForAgentCards(ctx context.Context, c cache.Cache) error {
	inf, err := c.GetInformer(ctx, &v1alpha1.AgentCard{})
	if err != nil {
		return fmt.Errorf("discovery API: AgentCard informer: %w", err)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	return nil
}

// debugWriter turns the HTTP server's own log lines into debug-level structured logs.
type debugWriter struct{ logger logr.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.logger.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
