package controller_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/controller"
	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/discovery"
)

const (
	bundleNS   = "kagenti-system"
	bundleName = "spire-bundle"
)

// cardPort is the port the test pods serve their cards on: chosen per test process, so that two
// runs of this suite at once (two worktrees, or go test beside make test) do not bind the same
// loopback pod IP and port.
var cardPort = freeLoopbackPort()

func freeLoopbackPort() int32 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("choosing the test pods' card port: %v", err))
	}
	defer func() { _ = ln.Close() }()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

var (
	k8s client.Client
	// cached reads through the controller's own cache.
	cached client.Reader
	// podCache is the controller's cache, to look at its pod informer.
	podCache cache.Cache
	cs       kubernetes.Interface
	restCfg  *rest.Config
	ca       *devca.CA
	discURL  string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		_, file, _, _ := runtime.Caller(0)
		assets = filepath.Join(filepath.Dir(file), "../../../bin")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: envtest assets missing: %v (build them with `make tools`, set KUBEBUILDER_ASSETS)\n", err)
		return 1
	}
	_, file, _, _ := runtime.Caller(0)
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.Level(zapLevel()))))
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(filepath.Dir(file), "../../../deploy/crds/agentcard")},
		ErrorIfCRDPathMissing: true,
		// The machines running this are shared; give the API server time to come up.
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting envtest: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	restCfg = cfg
	// Client-side rate limits as a tuned deployment would set them (client-go's default is 5 QPS).
	cfg.QPS, cfg.Burst = 200, 400

	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	// The manager's requests go through podGets: the shipped role grants no get on pods.
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.Wrap(podGets.wrap)
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   controller.CacheOptions(nil),
		Client:  controller.ClientOptions(),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: manager: %v\n", err)
		return 1
	}
	ca, err = devca.NewCA("cluster.local", time.Hour)
	if err != nil {
		panic(err)
	}
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	cs = kubernetes.NewForConfigOrDie(cfg)
	cached = mgr.GetClient()
	podCache = mgr.GetCache()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mustCreate(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: bundleNS}})
	mustCreate(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: bundleNS, Name: bundleName},
		Data: map[string]string{"bundle.crt": string(devca.CertPEM(ca.Cert))}})

	if err := controller.Setup(mgr, controller.Options{
		TrustBundleConfigMap: bundleNS + "/" + bundleName,
		TrustDomain:          "cluster.local",
		FetchTimeout:         5 * time.Second, // not less: under load (-race, parallel packages) a 256 KiB answer takes over 1s
		AutoCreate:           true,
		// TestIdentityBindingStaysInItsNamespace binds one of these from another namespace.
		CrossNamespaceIdentities: []string{"spiffe://cluster.local/ns/shared-*/sa/*"},
	}); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: setup: %v\n", err)
		return 1
	}
	srv := httptest.NewServer(&discovery.Server{Reader: mgr.GetClient(), Authorizer: &discovery.KubeAuthorizer{Client: cs, TTL: time.Millisecond}})
	defer srv.Close()
	discURL = srv.URL
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		}
	}()
	code := m.Run()
	if got := podGets.seen(); len(got) > 0 && code == 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the controller read pods by name (%v), which its shipped role does not allow (deploy/rbac/agentcard/role.yaml: list, watch, patch)\n", got)
		return 1
	}
	return code
}

// podGets records the controller's GETs of one pod by name (/api/v1/namespaces/<ns>/pods/<name>).
var podGets podGetRecorder

type podGetRecorder struct {
	mu   sync.Mutex
	gets []string
}

func (r *podGetRecorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
		if req.Method == http.MethodGet && len(parts) == 6 && parts[0] == "api" && parts[2] == "namespaces" && parts[4] == "pods" {
			r.mu.Lock()
			r.gets = append(r.gets, parts[3]+"/"+parts[5])
			r.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (r *podGetRecorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.gets...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func zapLevel() int8 {
	if os.Getenv("AGENTCARD_TEST_LOG") != "" {
		return -1
	}
	return 5 // errors only... quiet
}

func mustCreate(ctx context.Context, o client.Object) {
	if err := k8s.Create(ctx, o); err != nil {
		panic(err)
	}
}

var nsCounter atomic.Int32

// newNamespace creates a namespace for one test. Its workloads and AgentCards are deleted when the
// test ends (envtest runs no namespace controller): the loopback pod IPs are reused by the next
// run of the same test (-count), whose card servers must not be fetched by the last run's cards.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("ac-test-%d", nsCounter.Add(1))
	require.NoError(t, k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	t.Cleanup(func() {
		ctx := context.Background()
		for _, o := range []client.Object{&appsv1.Deployment{}, &v1alpha1.AgentCard{}} {
			_ = k8s.DeleteAllOf(ctx, o, client.InNamespace(name))
		}
		// Wait until the controller's cache no longer has them: from then on no sync fetches for them.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			var cards v1alpha1.AgentCardList
			if err := cached.List(ctx, &cards, client.InNamespace(name)); err == nil && len(cards.Items) == 0 {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return name
}

// cardServer serves body on ip:cardPort, counting 200 and 304 answers.
type cardServer struct {
	ok, notModified atomic.Int32
	body            atomic.Pointer[[]byte]
}

func serveCard(t *testing.T, ip string, body []byte) *cardServer {
	t.Helper()
	s := &cardServer{}
	s.body.Store(&body)
	serveOn(t, ip, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/agent-card.json" {
			http.NotFound(w, r)
			return
		}
		b := *s.body.Load()
		etag := fmt.Sprintf(`"%d-%x"`, len(b), b[len(b)/2:min(len(b), len(b)/2+8)])
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			s.notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		s.ok.Add(1)
		_, _ = w.Write(b)
	}))
	return s
}

func serveOn(t *testing.T, ip string, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", ip, cardPort))
	require.NoError(t, err, "binding a loopback pod IP (Linux routes all of 127.0.0.0/8 to lo)")
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// makePod creates a running, ready pod with ip.
func makePod(t *testing.T, ns, name, ip, sa string, labels map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "agent", Image: "agent:1",
			Ports: []corev1.ContainerPort{{Name: "a2a", ContainerPort: cardPort}}}}},
	}
	require.NoError(t, k8s.Create(ctx, p))
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	require.NoError(t, k8s.Status().Update(ctx, p))
	return p
}

func getCard(t *testing.T, ns, name string) *v1alpha1.AgentCard {
	t.Helper()
	var c v1alpha1.AgentCard
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &c))
	return &c
}

// eventually polls f (which reports what is still missing) until it returns "".
func eventually(t *testing.T, timeout time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if last = f(); last == "" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("condition not met within %s: %s", timeout, last)
}
