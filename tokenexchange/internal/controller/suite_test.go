package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/idpclient"
	"github.com/kagenti/platform/tokenexchange/internal/controller"
	"github.com/kagenti/platform/tokenexchange/internal/registrar"
	txwebhook "github.com/kagenti/platform/tokenexchange/internal/webhook"
)

// SkipWebhookLabel exempts an object from the validating webhook in these tests, to exercise the
// reconciler's own validation (the path taken where the webhook is not installed).
const SkipWebhookLabel = "test.kagenti.io/skip-webhook"

var (
	k8s     client.WithWatch // direct (uncached) client for the tests
	scheme  = k8sruntime.NewScheme()
	testCfg *rest.Config // the API server's, for tests that run a manager of their own
	// suiteSVIDs is the suite controller's Workload API (registration_test.go).
	suiteSVIDs *testSVIDs
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func run(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		os.Setenv("KUBEBUILDER_ASSETS", filepath.Join(repoRoot(), "bin"))
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: envtest binary %s missing in KUBEBUILDER_ASSETS=%s; build it with `make tools` (hack/tools.sh)\n", b, assets)
			return 1
		}
	}
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme) // tests change the installed CRD

	wh, err := webhookConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: reading the webhook configuration: %v\n", err)
		return 1
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repoRoot(), "deploy", "crds", "tokenexchange")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{ValidatingWebhooks: []*admissionv1.ValidatingWebhookConfiguration{wh}},
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting envtest: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()

	// As ctrl.GetConfig does for the binary: no client-side rate limit (the API server's priority
	// and fairness applies); envtest's config would otherwise get client-go's 5 QPS.
	cfg.QPS = -1
	testCfg = cfg
	wo := env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject:         controller.CacheByObject(),
		},
		WebhookServer: txwebhook.NewServer(webhook.Options{Host: wo.LocalServingHost, Port: wo.LocalServingPort, CertDir: wo.LocalServingCertDir}),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: manager: %v\n", err)
		return 1
	}
	statusClient := controller.NewPodStatusClient()
	statusClient.Transport.(*http.Transport).DialContext = podNetwork.dial
	svidDir, err := os.MkdirTemp("", "tokenexchange-svids-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	defer os.RemoveAll(svidDir)
	if suiteSVIDs, err = newTestSVIDs(svidDir); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the test trust domain: %v\n", err)
		return 1
	}
	if err := controller.Setup(mgr, controller.Options{Webhook: &txwebhook.Options{CertDir: wo.LocalServingCertDir}, PodStatusClient: statusClient,
		RestartStartedWithoutContent: true,
		Registrar:                    &controller.Registrar{Registrar: &registrar.Registrar{SVIDs: suiteSVIDs, HTTP: idpclient.New()}}}); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: setup: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		fmt.Fprintln(os.Stderr, "FAIL: cache did not sync")
		return 1
	}
	// failurePolicy is Ignore: a test must not reach the API server before the webhook serves.
	started := mgr.GetWebhookServer().StartedChecker()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return started(nil) == nil, nil
	}); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: the webhook server did not start")
		return 1
	}
	k8s, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: client: %v\n", err)
		return 1
	}
	return m.Run()
}

func zapLevel() zapcore.Level {
	if os.Getenv("TEST_VERBOSE") == "1" {
		return -1
	}
	return zapcore.DPanicLevel // quiet: expected reconcile errors are asserted through status
}

// webhookConfig is the shipped ValidatingWebhookConfiguration (so the tests exercise its rules),
// with one addition: objects labelled SkipWebhookLabel bypass it, to reach the reconciler's checks.
func webhookConfig() (*admissionv1.ValidatingWebhookConfiguration, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "kustomize", "tokenexchange", "validatingwebhookconfiguration.yaml"))
	if err != nil {
		return nil, err
	}
	var wh admissionv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(b, &wh); err != nil {
		return nil, err
	}
	for i := range wh.Webhooks {
		wh.Webhooks[i].ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: SkipWebhookLabel, Operator: metav1.LabelSelectorOpDoesNotExist}}}
	}
	return &wh, nil
}

// ---- helpers ----

func namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tx-" + rand.String(6)}}
	must(t, k8s.Create(context.Background(), ns))
	// Not deleted: envtest has no namespace controller, a deleted namespace stays Terminating.
	return ns.Name
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds or 30 s passed (a timeout for a hung test, not an assertion
// on speed).
func eventually(t testing.TB, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			ok, msg := cond(ctx)
			last = msg
			return ok, nil
		})
	if err != nil {
		t.Fatalf("%s: did not happen (last: %s)", what, last)
	}
}

func deployment(ns, name string, replicas int32, injected bool) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"kagenti.io/inject": "enabled"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{
					ServiceAccountName: name,
					Containers:         []corev1.Container{{Name: "agent", Image: "example.com/agent:v1"}},
				},
			},
		},
	}
	if injected {
		markInjected(&d.Spec.Template)
	}
	return d
}

// markInjected does what the injector does to a pod template, as far as this controller can tell:
// the status annotation and the token-exchange ConfigMap volume.
func markInjected(t *corev1.PodTemplateSpec) {
	if t.Annotations == nil {
		t.Annotations = map[string]string{}
	}
	t.Annotations[contract.InjectionStatusAnnotation] = `{"version":"test","injected":["spiffe-helper","client-registration","auth-proxy","envoy-proxy"]}`
}

func tokenExchange(ns, name, target string) *v1alpha1.TokenExchange {
	return &v1alpha1.TokenExchange{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.TokenExchangeSpec{TargetRef: duckRef("Deployment", target)},
	}
}

func getTX(ctx context.Context, t testing.TB, ns, name string) *v1alpha1.TokenExchange {
	te := &v1alpha1.TokenExchange{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, te); err != nil {
		t.Fatalf("get TokenExchange %s: %v", name, err)
	}
	return te
}

func condition(te *v1alpha1.TokenExchange, condType string) *metav1.Condition {
	for i := range te.Status.Conditions {
		if te.Status.Conditions[i].Type == condType {
			return &te.Status.Conditions[i]
		}
	}
	return nil
}

// waitReady waits until condition condType has status and reason for the current generation.
func waitCondition(t testing.TB, ns, name, condType string, status metav1.ConditionStatus, reason string) *v1alpha1.TokenExchange {
	t.Helper()
	var te *v1alpha1.TokenExchange
	eventually(t, fmt.Sprintf("%s %s=%s/%s", name, condType, status, reason), func(ctx context.Context) (bool, string) {
		te = getTX(ctx, t, ns, name)
		c := condition(te, condType)
		if c == nil {
			return false, fmt.Sprintf("no %s condition; status %+v", condType, te.Status)
		}
		return c.Status == status && c.Reason == reason && te.Status.ObservedGeneration == te.Generation,
			fmt.Sprintf("%s=%s reason %s: %s (phase %s)", condType, c.Status, c.Reason, c.Message, te.Status.Phase)
	})
	return te
}

// readyHistory records every Ready condition the API server stores for one TokenExchange, from a
// watch: a transient flip (Ready False for a moment, then True again within the same second) is
// invisible to polling and to lastTransitionTime's one-second resolution, but not to this.
type readyHistory struct {
	mu     sync.Mutex
	states []readyState
}

type readyState struct {
	resourceVersion string
	observed, gen   int64
	ready           *metav1.Condition
}

func (s readyState) String() string {
	if s.ready == nil {
		return fmt.Sprintf("rv %s gen %d/%d: no Ready", s.resourceVersion, s.observed, s.gen)
	}
	return fmt.Sprintf("rv %s gen %d/%d: Ready=%s %s since %s", s.resourceVersion, s.observed, s.gen,
		s.ready.Status, s.ready.Reason, s.ready.LastTransitionTime.UTC().Format(time.RFC3339))
}

// watchReady records the Ready condition of TokenExchange ns/name, from the namespace's current
// resourceVersion on (start it before creating the object); it stops at the end of the test.
func watchReady(t *testing.T, ns, name string) *readyHistory {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var list v1alpha1.TokenExchangeList
	must(t, k8s.List(ctx, &list, client.InNamespace(ns)))
	w, err := k8s.Watch(ctx, &v1alpha1.TokenExchangeList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	must(t, err)
	h := &readyHistory{}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			te, ok := ev.Object.(*v1alpha1.TokenExchange)
			if !ok || te.Name != name {
				continue
			}
			h.mu.Lock()
			h.states = append(h.states, readyState{te.ResourceVersion, te.Status.ObservedGeneration, te.Generation,
				condition(te, v1alpha1.ConditionReady)})
			h.mu.Unlock()
		}
	}()
	return h
}

// wasUnsteadyAfterReady returns whether, once Ready was first stored True, a later stored status
// had Ready not True or True with another lastTransitionTime; and every state seen, for the message.
func (h *readyHistory) wasUnsteadyAfterReady() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var first *metav1.Condition
	unsteady := false
	lines := make([]string, len(h.states))
	for i, s := range h.states {
		lines[i] = s.String()
		switch {
		case first == nil && s.ready != nil && s.ready.Status == metav1.ConditionTrue:
			first = s.ready
		case first != nil && (s.ready == nil || s.ready.Status != metav1.ConditionTrue ||
			!s.ready.LastTransitionTime.Equal(&first.LastTransitionTime)):
			unsteady = true
			lines[i] += "  <- unsteady"
		}
	}
	return unsteady, strings.Join(lines, "\n")
}
