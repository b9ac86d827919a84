package webhook_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// suite is one API server with the webhook registered from deploy/kustomize/injector.
type suite struct {
	env        *envtest.Environment
	c          client.Client
	stop       context.CancelFunc // stops the webhook server
	configPath string
	watcher    *kit.Watcher[*config.Config]
	metrics    *injectorwebhook.Metrics
	levels     *injectorwebhook.NamespaceLevels // the handler's Pod Security levels: empty until a test watches
	timings    *timings                         // exact durations of every admission, for TestLoad
	handshakes atomic.Int64                     // TLS handshakes the webhook server began, for TestLoad
}

// countHandshakes counts every TLS handshake the server begins (the configuration itself unchanged).
func (s *suite) countHandshakes(c *tls.Config) {
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		s.handshakes.Add(1)
		return nil, nil
	}
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

func startSuite(t *testing.T) *suite {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(repoRoot(), "bin")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			t.Fatalf("envtest assets missing: %s/%s not found; run `make tools` (or hack/tools.sh envtest) and set KUBEBUILDER_ASSETS", assets, b)
		}
	}
	wh := loadWebhookConfiguration(t)
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		WebhookInstallOptions: envtest.WebhookInstallOptions{MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{wh}},
	}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	require.NoError(t, err)

	s := &suite{env: env, c: c, configPath: filepath.Join(t.TempDir(), "config.yaml")}
	require.NoError(t, os.WriteFile(s.configPath, nil, 0o644))
	s.watcher, err = kit.NewWatcher(s.configPath, config.Parse, logr.Discard())
	require.NoError(t, err)
	s.metrics = injectorwebhook.NewMetrics(nil)
	s.levels = &injectorwebhook.NamespaceLevels{}
	h := &injectorwebhook.Handler{Config: s.watcher.Current, ExcludedNamespaces: []string{"kube-system", "kagenti-system"}, Metrics: s.metrics, PodSecurity: s.levels}

	o := env.WebhookInstallOptions
	srv := webhook.NewServer(webhook.Options{Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir,
		TLSOpts: []func(*tls.Config){injectorwebhook.HTTP1Only, s.countHandshakes}}) // HTTP/1.1 as NewServer serves
	s.timings = &timings{}
	srv.Register(injectorwebhook.Path, s.timings.serveHTTP(injectorwebhook.HTTPHandler(s.timings.handler(h))))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Start(ctx) }()
	s.stop = func() { cancel(); <-done }
	t.Cleanup(func() { cancel() })
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return srv.StartedChecker()(nil) == nil, nil }), "webhook server did not start")
	return s
}

// loadWebhookConfiguration reads the shipped MutatingWebhookConfiguration, so the tests exercise its
// rules and selectors. envtest turns service.path into a URL as "https://host:port/" + path, so the
// leading slash is dropped here.
func loadWebhookConfiguration(t *testing.T) *admissionregistrationv1.MutatingWebhookConfiguration {
	b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "kustomize", "injector", "mutatingwebhookconfiguration.yaml"))
	require.NoError(t, err)
	var wh admissionregistrationv1.MutatingWebhookConfiguration
	require.NoError(t, yaml.UnmarshalStrict(b, &wh))
	for i := range wh.Webhooks {
		p := strings.TrimPrefix(*wh.Webhooks[i].ClientConfig.Service.Path, "/")
		wh.Webhooks[i].ClientConfig.Service.Path = &p
	}
	return &wh
}

func (s *suite) namespace(t *testing.T, name string, labels map[string]string) string {
	t.Helper()
	require.NoError(t, s.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}))
	return name
}

var userTemplate = corev1.PodTemplateSpec{
	ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
	Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/kagenti/weather-agent:v0.1.0"}}},
}

func meta(ns, name string, labels, annotations map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations}
}

var labelled = map[string]string{inject.LabelInject: inject.InjectEnabled}

// workloads returns one object of each kind with the given metadata, and how to read its template.
func workloads(ns, name string, labels, annotations map[string]string) map[string]client.Object {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}
	// Each object gets its own copy: a test that edits one template must not edit the others.
	tmpl := func() corev1.PodTemplateSpec { return *userTemplate.DeepCopy() }
	job := func() corev1.PodTemplateSpec {
		t := tmpl()
		t.Spec.RestartPolicy = corev1.RestartPolicyNever
		return t
	}
	return map[string]client.Object{
		"Deployment":  &appsv1.Deployment{ObjectMeta: meta(ns, name, labels, annotations), Spec: appsv1.DeploymentSpec{Selector: sel, Template: tmpl()}},
		"StatefulSet": &appsv1.StatefulSet{ObjectMeta: meta(ns, name, labels, annotations), Spec: appsv1.StatefulSetSpec{Selector: sel, Template: tmpl()}},
		"DaemonSet":   &appsv1.DaemonSet{ObjectMeta: meta(ns, name, labels, annotations), Spec: appsv1.DaemonSetSpec{Selector: sel, Template: tmpl()}},
		"Job":         &batchv1.Job{ObjectMeta: meta(ns, name, labels, annotations), Spec: batchv1.JobSpec{Template: job()}},
		"CronJob": &batchv1.CronJob{ObjectMeta: meta(ns, name, labels, annotations), Spec: batchv1.CronJobSpec{Schedule: "*/5 * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: job()}}}},
	}
}

func template(obj client.Object) *corev1.PodTemplateSpec {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template
	case *appsv1.StatefulSet:
		return &o.Spec.Template
	case *appsv1.DaemonSet:
		return &o.Spec.Template
	case *batchv1.Job:
		return &o.Spec.Template
	case *batchv1.CronJob:
		return &o.Spec.JobTemplate.Spec.Template
	}
	panic(fmt.Sprintf("unexpected %T", obj))
}

func containerNames(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func isInjected(t *corev1.PodTemplateSpec) bool {
	_, ok := t.Annotations[inject.AnnotationStatus]
	return ok && slices.Contains(containerNames(t.Spec.InitContainers), config.Authbridge)
}

func TestWebhook(t *testing.T) {
	s := startSuite(t)
	ctx := context.Background()
	injected := s.namespace(t, "agents", map[string]string{"kagenti.io/injection": "enabled"})
	injectedTrue := s.namespace(t, "agents-true", map[string]string{"kagenti.io/injection": "true"})
	plain := s.namespace(t, "plain", nil)
	system := s.namespace(t, "kagenti-system", map[string]string{"kagenti.io/injection": "enabled"})

	t.Run("labelled workloads of every kind are injected", func(t *testing.T) {
		for _, ns := range []string{injected, injectedTrue} {
			for kind, obj := range workloads(ns, "labelled", labelled, nil) {
				require.NoError(t, s.c.Create(ctx, obj), kind)
				got := obj.DeepCopyObject().(client.Object)
				require.NoError(t, s.c.Get(ctx, client.ObjectKeyFromObject(obj), got))
				tmpl := template(got)
				require.True(t, isInjected(tmpl), "%s in %s: stored object not injected: %v", kind, ns, containerNames(tmpl.Spec.InitContainers))
				require.Equal(t, []string{config.ProxyInit, config.Authbridge}, containerNames(tmpl.Spec.InitContainers), kind)
				require.Equal(t, []string{"sidecar", "register", "inbound", "outbound"}, tmpl.Spec.InitContainers[1].Args, kind)
				require.Equal(t, corev1.ContainerRestartPolicyAlways, *tmpl.Spec.InitContainers[1].RestartPolicy, "native sidecars")
				require.Contains(t, volumeNames(tmpl), inject.VolumeTrace)
				for _, v := range tmpl.Spec.Volumes {
					if v.Name == inject.VolumeTrace {
						require.Equal(t, "labelled-trace", v.ConfigMap.Name)
					}
				}
			}
		}
	})

	// The goldens' probes, restart policies and security contexts pass the API server's validation
	// (probes on an init container are valid only with restartPolicy: Always, a startup probe
	// needs successThreshold 1, …): each is created with a server-side dry run where the webhook
	// does not act.
	t.Run("every golden injection is a valid object for the API server", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join("..", "inject", "testdata", "golden", "*.yaml"))
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			u := &unstructured.Unstructured{}
			require.NoError(t, yaml.Unmarshal(b, &u.Object), f)
			u.SetNamespace(plain)
			require.NoError(t, s.c.Create(ctx, u, client.DryRunAll), "%s is rejected by the API server", filepath.Base(f))
		}
	})

	t.Run("unlabelled workloads are untouched", func(t *testing.T) {
		for kind, obj := range workloads(injected, "unlabelled", map[string]string{"app": "x"}, nil) {
			require.NoError(t, s.c.Create(ctx, obj), kind)
			require.False(t, isInjected(template(obj)), kind)
			require.Empty(t, template(obj).Spec.InitContainers, kind)
		}
	})

	t.Run("namespace not labelled: untouched", func(t *testing.T) {
		for kind, obj := range workloads(plain, "labelled", labelled, nil) {
			require.NoError(t, s.c.Create(ctx, obj), kind)
			require.Empty(t, template(obj).Spec.InitContainers, kind)
		}
	})

	t.Run("own namespace: untouched", func(t *testing.T) {
		obj := workloads(system, "labelled", labelled, nil)["Deployment"]
		require.NoError(t, s.c.Create(ctx, obj))
		require.Empty(t, template(obj).Spec.InitContainers)
	})

	t.Run("update of an injected Deployment changes nothing", func(t *testing.T) {
		d := &appsv1.Deployment{}
		require.NoError(t, s.c.Get(ctx, client.ObjectKey{Namespace: injected, Name: "labelled"}, d))
		before := d.DeepCopy()
		// A label (not an annotation: Deployments bump their generation on annotation changes).
		d.Labels["touched"] = "yes"
		require.NoError(t, s.c.Update(ctx, d))
		require.True(t, equality.Semantic.DeepEqual(before.Spec.Template, d.Spec.Template), "the template must not change")
		require.Zero(t, counter(t, s.metrics, "Deployment", "UPDATE", injectorwebhook.ResultMutated), "no patch on update")
		require.Equal(t, before.Generation, d.Generation, "no new generation, so no rollout")
		// The same holds for an update that sends the whole stored object back (kubectl replace/edit).
		require.NoError(t, s.c.Update(ctx, d))
		require.Equal(t, before.Generation, d.Generation)
	})

	t.Run("a config change re-injects on the next update, without restart", func(t *testing.T) {
		require.NoError(t, os.WriteFile(s.configPath, []byte("images: {authbridge: 'ghcr.io/kagenti/kagenti-authbridge:v0.2.0'}\n"), 0o644))
		require.NoError(t, s.watcher.Reload())
		d := &appsv1.Deployment{}
		require.NoError(t, s.c.Get(ctx, client.ObjectKey{Namespace: injected, Name: "labelled"}, d))
		d.Labels["touched"] = "again"
		require.NoError(t, s.c.Update(ctx, d))
		require.Equal(t, "ghcr.io/kagenti/kagenti-authbridge:v0.2.0", d.Spec.Template.Spec.InitContainers[1].Image)
		require.Equal(t, []string{config.ProxyInit, config.Authbridge}, containerNames(d.Spec.Template.Spec.InitContainers))

		// An invalid configuration is rejected and the last good one stays.
		require.NoError(t, os.WriteFile(s.configPath, []byte("sidecarMode: sometimes\n"), 0o644))
		require.ErrorContains(t, s.watcher.Reload(), "sidecarMode")
		require.Equal(t, "ghcr.io/kagenti/kagenti-authbridge:v0.2.0", s.watcher.Current().Images.Authbridge)
		require.NoError(t, os.WriteFile(s.configPath, nil, 0o644))
		require.NoError(t, s.watcher.Reload())
	})

	t.Run("disabled removes exactly what was injected", func(t *testing.T) {
		for kind, obj := range workloads(injected, "labelled", nil, nil) {
			if kind == "Job" {
				continue // immutable template: see below
			}
			require.NoError(t, s.c.Get(ctx, client.ObjectKeyFromObject(obj), obj))
			require.True(t, isInjected(template(obj)), kind)
			obj.GetLabels()[inject.LabelInject] = inject.InjectDisabled
			require.NoError(t, s.c.Update(ctx, obj), kind)
			tmpl := template(obj)
			require.Empty(t, tmpl.Spec.InitContainers, kind)
			require.Empty(t, tmpl.Spec.Volumes, kind)
			require.NotContains(t, tmpl.Annotations, inject.AnnotationStatus, kind)
			require.Equal(t, []string{"agent"}, containerNames(tmpl.Spec.Containers), kind)
			require.Empty(t, tmpl.Spec.Containers[0].VolumeMounts, kind)
			require.Empty(t, tmpl.Spec.Containers[0].Env, kind)
		}
	})

	t.Run("Job update is accepted and leaves the template alone", func(t *testing.T) {
		j := &batchv1.Job{}
		require.NoError(t, s.c.Get(ctx, client.ObjectKey{Namespace: injected, Name: "labelled"}, j))
		before := j.Spec.Template.DeepCopy()
		j.Labels[inject.LabelInject] = inject.InjectDisabled
		j.Labels["extra"] = "yes"
		require.NoError(t, s.c.Update(ctx, j))
		require.True(t, equality.Semantic.DeepEqual(*before, j.Spec.Template))
	})

	t.Run("invalid annotations are denied with the key and accepted values", func(t *testing.T) {
		for _, tc := range []struct{ key, value, want string }{
			{inject.AnnotationExcludeComponents, "envoy", "accepted values (comma list): proxy-init, spiffe-helper"},
			{inject.AnnotationOutboundExclude, "http", "comma list of ports 1-65535"},
			{"kagenti.io/authbridge-memory", "a lot", `invalid value "a lot": accepted values: a memory quantity from 1Mi to 64Gi`},
			{"kagenti.io/authbridge-cpu", "1e400", `invalid value "1e400": accepted values: a cpu quantity from 1m to 64`},
			{"kagenti.io/authbridge-memory", "999999999Ei", `invalid value "999999999Ei"`},
			{"kagenti.io/envoy-proxy-memory", "256Mi", `envoy-proxy runs in the authbridge container with the other identity roles and has no resources of its own; use kagenti.io/authbridge-memory`},
		} {
			obj := workloads(injected, "invalid", labelled, map[string]string{tc.key: tc.value})["Deployment"]
			err := s.c.Create(ctx, obj)
			require.Error(t, err, tc.key)
			require.Contains(t, err.Error(), tc.key)
			require.Contains(t, err.Error(), tc.want)
		}
	})

	t.Run("generateName", func(t *testing.T) {
		obj := workloads(injected, "", labelled, nil)["Deployment"]
		obj.SetGenerateName("gen-")
		require.NoError(t, s.c.Create(ctx, obj))
		tmpl := template(obj)
		require.True(t, isInjected(tmpl))
		for _, v := range tmpl.Spec.Volumes {
			if v.Name == inject.VolumeTrace {
				// The API server names the object after admission: the prefix is all the webhook sees.
				require.Equal(t, "gen-trace", v.ConfigMap.Name, "stored name %s", obj.GetName())
			}
		}
	})

	t.Run("a kagenti.io/inject value other than enabled or disabled is refused", func(t *testing.T) {
		for _, v := range []string{"true", "yes", "enable", "Enabled"} {
			err := s.c.Create(ctx, workloads(injected, "odd-value", map[string]string{inject.LabelInject: v}, nil)["Deployment"])
			require.Error(t, err, "%q must not be admitted uninjected", v)
			require.Contains(t, err.Error(), fmt.Sprintf("label kagenti.io/inject: invalid value %q: accepted values: enabled, disabled", v))
		}
	})

	t.Run("an update that changes nothing the injector reads is admitted with a warning", func(t *testing.T) {
		// Stored before the injector saw it: the namespace opts in afterwards.
		legacy := s.namespace(t, "legacy", nil)
		d := workloads(legacy, "old", map[string]string{inject.LabelInject: "true"}, nil)["Deployment"].(*appsv1.Deployment)
		d.Finalizers = []string{"example.com/hold"}
		require.NoError(t, s.c.Create(ctx, d))
		ns := &corev1.Namespace{}
		require.NoError(t, s.c.Get(ctx, client.ObjectKey{Name: legacy}, ns))
		ns.Labels["kagenti.io/injection"] = "enabled"
		require.NoError(t, s.c.Update(ctx, ns))

		c, warnings := s.clientWithWarnings(t)
		d.Labels["team"] = "a"
		require.NoError(t, c.Update(ctx, d), "an unrelated label")
		require.Empty(t, d.Spec.Template.Spec.InitContainers)
		require.Contains(t, warnings.last(), `label kagenti.io/inject: invalid value "true"`)
		require.Contains(t, warnings.last(), "admitted unchanged")

		d.Spec.Template.Spec.Containers[0].Image = "ghcr.io/kagenti/weather-agent:v0.2.0"
		err := c.Update(ctx, d)
		require.Error(t, err, "an update of the pod template is refused")
		require.Contains(t, err.Error(), `label kagenti.io/inject: invalid value "true"`)

		// Deletion is never blocked: removing the last finalizer (as the garbage collector does) passes.
		require.NoError(t, s.c.Get(ctx, client.ObjectKeyFromObject(d), d))
		require.NoError(t, s.c.Delete(ctx, d))
		require.NoError(t, s.c.Get(ctx, client.ObjectKeyFromObject(d), d))
		d.Finalizers = nil
		require.NoError(t, c.Update(ctx, d))
		require.True(t, apierrors.IsNotFound(s.c.Get(ctx, client.ObjectKeyFromObject(d), d)), "deleted")
	})

	t.Run("kagenti.io/signature-verified in a pod template is refused", func(t *testing.T) {
		for _, mode := range []string{inject.InjectEnabled, inject.InjectDisabled} {
			objs := workloads(injected, "forged", map[string]string{inject.LabelInject: mode}, nil)
			for _, kind := range []string{"Deployment", "CronJob"} {
				obj := objs[kind]
				template(obj).Labels = map[string]string{"app": "agent", inject.LabelSignatureVerified: "true"}
				err := s.c.Create(ctx, obj)
				require.Error(t, err, "%s %s", kind, mode)
				path := map[string]string{"Deployment": "spec.template", "CronJob": "spec.jobTemplate.spec.template"}[kind]
				require.Contains(t, err.Error(), path+`.metadata.labels: kagenti.io/signature-verified: invalid value "true": only agentcard sets this label`)
			}
		}
	})

	t.Run("a user port an injected sidecar listens on is refused", func(t *testing.T) {
		for port, component := range map[int32]string{8080: config.AuthProxy, 15123: config.EnvoyProxy, 15128: config.Authbridge} {
			obj := workloads(injected, "clash", labelled, nil)["Deployment"]
			template(obj).Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: port}}
			err := s.c.Create(ctx, obj)
			require.Error(t, err)
			require.Contains(t, err.Error(), fmt.Sprintf(`spec.template.spec.containers[0] ("agent"): port %d/TCP is the port the injected %s listens on`, port, component))
		}
	})

	t.Run("hostNetwork: not injected, with a warning; an injected template that switches is stripped", func(t *testing.T) {
		c, warnings := s.clientWithWarnings(t)
		obj := workloads(injected, "host", labelled, nil)["Deployment"]
		template(obj).Spec.HostNetwork = true
		require.NoError(t, c.Create(ctx, obj))
		require.Empty(t, template(obj).Spec.InitContainers)
		require.NotContains(t, template(obj).Annotations, inject.AnnotationStatus)
		require.Contains(t, warnings.last(), `Deployment "host" is not injected: the pod template sets hostNetwork: true`)

		obj = workloads(injected, "switch", labelled, nil)["Deployment"]
		require.NoError(t, c.Create(ctx, obj))
		require.True(t, isInjected(template(obj)))
		template(obj).Spec.HostNetwork = true
		require.NoError(t, c.Update(ctx, obj))
		tmpl := template(obj)
		require.Empty(t, tmpl.Spec.InitContainers, "the injected parts are removed")
		require.Empty(t, tmpl.Spec.Volumes)
		require.NotContains(t, tmpl.Annotations, inject.AnnotationStatus)
		require.Empty(t, tmpl.Spec.Containers[0].VolumeMounts)
		require.Empty(t, tmpl.Spec.Containers[0].Env)
		require.Contains(t, warnings.last(), "the parts injected before were removed")
	})

	t.Run("metrics count requests", func(t *testing.T) {
		require.Positive(t, counter(t, s.metrics, "Deployment", "CREATE", injectorwebhook.ResultMutated))
		require.Positive(t, counter(t, s.metrics, "Deployment", "CREATE", injectorwebhook.ResultDenied))
	})

	// Last: the webhook goes away.
	t.Run("webhook down: labelled creation refused, unlabelled unaffected", func(t *testing.T) {
		s.stop()
		err := s.c.Create(ctx, workloads(injected, "while-down", labelled, nil)["Deployment"])
		require.Error(t, err, "fail closed: a labelled workload must not be created without injection")
		require.Contains(t, err.Error(), "inject.kagenti.io")
		require.NoError(t, s.c.Create(ctx, workloads(injected, "while-down", map[string]string{"app": "x"}, nil)["Deployment"]))
		require.NoError(t, s.c.Create(ctx, workloads(plain, "while-down", labelled, nil)["Deployment"]))
	})
}

// warningRecorder keeps the warnings the API server returns (admission warnings among them).
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

// last returns the last warning received.
func (w *warningRecorder) last() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.msgs) == 0 {
		return ""
	}
	return w.msgs[len(w.msgs)-1]
}

// clientWithWarnings returns a client whose warnings are recorded, as kubectl would print them.
func (s *suite) clientWithWarnings(t *testing.T) (client.Client, *warningRecorder) {
	w := &warningRecorder{}
	cfg := rest.CopyConfig(s.env.Config)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	require.NoError(t, err)
	return c, w
}

func volumeNames(t *corev1.PodTemplateSpec) []string {
	var out []string
	for _, v := range t.Spec.Volumes {
		out = append(out, v.Name)
	}
	return out
}
