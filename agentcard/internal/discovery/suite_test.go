package discovery_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/discovery"
)

// The suite runs a real kube-apiserver + etcd (envtest): its TokenReview authenticates the
// service-account tokens the tests mint with the TokenRequest API, its SubjectAccessReview applies
// the RBAC the tests create.

var (
	restCfg *rest.Config
	k8s     client.Client
	cs      kubernetes.Interface
	scheme  = k8sruntime.NewScheme()
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "../../..")
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: envtest assets missing: %v (build them with `make tools`, set KUBEBUILDER_ASSETS)\n", err)
		return 1
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "deploy/crds/agentcard")},
		ErrorIfCRDPathMissing: true,
		// The machines these tests run on can be very loaded.
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting envtest: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	restCfg = cfg
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	cs = kubernetes.NewForConfigOrDie(cfg)
	return m.Run()
}

// reviewCounter counts the TokenReviews and SubjectAccessReviews a client sends, as a
// RoundTripper around its transport.
type reviewCounter struct {
	tokenReviews, accessReviews atomic.Int64
}

func (c *reviewCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tokenreviews"):
			c.tokenReviews.Add(1)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/subjectaccessreviews"):
			c.accessReviews.Add(1)
		}
		return rt.RoundTrip(r)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// api is a running discovery API.
type api struct {
	url string
	// health is the manager's health probe address.
	health  string
	reviews *reviewCounter
	// client trusts the API's CA.
	client *http.Client
}

// startAPI runs the discovery API as the binary wires it (discovery.Setup on a manager) on a
// free port; without o.CertDir it gets a certificate for 127.0.0.1 made for the test.
func startAPI(t *testing.T, o discovery.Options) *api {
	t.Helper()
	return startAPIAs(t, o, rest.ImpersonationConfig{})
}

// startAPIAs is startAPI with the manager's requests made as user (when set).
func startAPIAs(t *testing.T, o discovery.Options, user rest.ImpersonationConfig) *api {
	t.Helper()
	a := &api{reviews: &reviewCounter{}}
	cfg := rest.CopyConfig(restCfg)
	cfg.Impersonate = user
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.WrapTransport = a.reviews.wrap
	port := freePort(t)
	o.BindAddress = fmt.Sprintf("127.0.0.1:%d", port)
	a.url = "https://" + o.BindAddress
	var caPEM []byte
	if o.CertDir == "" && o.RotatorCertDir == "" {
		o.CertDir = t.TempDir()
		caPEM = writeServingCert(t, o.CertDir, "127.0.0.1")
	}
	a.health = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: a.health,
	})
	require.NoError(t, err)
	require.NoError(t, discovery.Setup(mgr, o))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	if caPEM != nil {
		a.client = httpsClient(t, caPEM)
	}
	return a
}

// httpsClient trusts only caPEM.
func httpsClient(t *testing.T, caPEM []byte) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	// Generous: the machines these tests run on can be very loaded (the race detector too). HTTP/2,
	// as a client library would use it: a burst shares one connection instead of opening fifty TLS
	// handshakes at once, which under load outlast the server's handshake timeout (EOF).
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// get sends GET path with the token (when not empty) and returns the response with its body read.
func (a *api) get(t *testing.T, path, token string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, a.url+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := a.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// readyz returns the status code of the manager's /readyz once the probe server answers.
func (a *api) readyz(t *testing.T) int {
	t.Helper()
	code := 0
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + a.health + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		code = resp.StatusCode
		return true, nil
	}))
	return code
}

// waitServing waits until the API answers.
func (a *api) waitServing(t *testing.T) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		resp, err := a.client.Get(a.url + "/healthz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}))
}

// newNamespace creates a namespace with a ServiceAccount "reader" allowed to get and list
// AgentCards in it, and one AgentCard; it returns the namespace.
func newNamespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "disc-"}}
	require.NoError(t, k8s.Create(ctx, ns))
	create := func(o client.Object) { require.NoError(t, k8s.Create(ctx, o)) }
	create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "reader"}})
	create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "stranger"}})
	create(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "cards"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"kagenti.io"}, Resources: []string{"agentcards"}, Verbs: []string{"get", "list"}}}})
	create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "cards"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "cards"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: ns.Name}}})
	create(&v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "weather"},
		Spec: v1alpha1.AgentCardSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "weather"}}}})
	// RBAC reaches the API server's authorizer through an informer: wait until it applies.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + ns.Name + ":reader",
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns.Name, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: "list", Group: "kagenti.io", Resource: "agentcards", Namespace: ns.Name},
		}}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed, err
	}))
	return ns.Name
}

// grantShippedRBAC creates the ServiceAccount kagenti-agentcard in ns with the RBAC the project
// ships for it (deploy/rbac/agentcard/role.yaml, generated from the code's markers: a ClusterRole,
// here renamed per test, and a Role for the controller's own namespace, here ns) and returns the
// identity to act as.
func grantShippedRBAC(t *testing.T, ns string, optional ...string) rest.ImpersonationConfig {
	t.Helper()
	ctx := context.Background()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "../../../deploy/rbac/agentcard/role.yaml"))
	require.NoError(t, err)
	docs := strings.Split(string(raw), "\n---\n")
	for _, role := range optional { // the optional ClusterRoles an install binds for a feature
		raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "../../../deploy/rbac/agentcard", role))
		require.NoError(t, err)
		docs = append(docs, string(raw))
	}
	const sa = "kagenti-agentcard"
	subject := rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: ns}
	require.NoError(t, k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}))
	kinds := 0
	for _, doc := range docs {
		var meta metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		switch meta.Kind {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &cr))
			cr.Name += "-" + ns
			require.NoError(t, k8s.Create(ctx, &cr))
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), &cr) })
			crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name},
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr.Name}, Subjects: []rbacv1.Subject{subject}}
			require.NoError(t, k8s.Create(ctx, crb))
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), crb) })
			kinds++
		case "Role":
			var r rbacv1.Role
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &r))
			r.Namespace = ns
			require.NoError(t, k8s.Create(ctx, &r))
			require.NoError(t, k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: r.Name},
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: r.Name}, Subjects: []rbacv1.Subject{subject}}))
			kinds++
		}
	}
	require.Equal(t, 2+len(optional), kinds, "role.yaml holds a ClusterRole and a Role, each optional file a ClusterRole")
	user := rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: user.UserName, Groups: user.Groups,
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: "update", Resource: "secrets", Namespace: ns, Name: "kagenti-agentcard-discovery-cert"},
		}}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed, err
	}))
	return user
}

// token mints a service-account token with the TokenRequest API.
func token(t *testing.T, ns, sa string, audiences ...string) string {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// writeServingCert writes tls.crt and tls.key for hosts, signed by a new CA (also written, as
// ca.crt), into dir, and returns the CA's PEM.
func writeServingCert(t *testing.T, dir string, hosts ...string) []byte {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	require.NoError(t, os.WriteFile(filepath.Join(dir, discovery.CAFile), caPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, discovery.CertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, discovery.KeyFile), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return caPEM
}
