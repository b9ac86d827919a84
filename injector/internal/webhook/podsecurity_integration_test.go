package webhook_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/injector/internal/inject"
	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
)

// warnings collects the warnings the API server returns to a client.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.list)
}

// TestPodSecurityWarningReachesTheClient: on the real API server, with the injector watching
// Namespaces as its ServiceAccount with the shipped RBAC only, a Deployment created in a namespace
// that enforces Pod Security baseline is admitted and injected, and the client gets the injector's
// warning naming the namespace's level and what it forbids; a pod of the injected template is then
// refused by the API server's own Pod Security admission for that very reason (issue 27: the
// Deployment was admitted and no pod ever came).
func TestPodSecurityWarningReachesTheClient(t *testing.T) {
	s := startSuite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s.namespace(t, "kagenti-system", nil)
	installShippedRBAC(t, s.c, filepath.Join(assetsDir(t), "kubectl"))
	nsCache, err := cache.New(asServiceAccount(s.env.Config, "kagenti-system", "kagenti-injector"), cache.Options{Scheme: clientgoscheme.Scheme,
		ByObject: map[client.Object]cache.ByObject{&corev1.Namespace{}: {Transform: injectorwebhook.TrimNamespace}}})
	require.NoError(t, err)
	require.NoError(t, s.levels.Watch(ctx, nsCache))
	go func() { _ = nsCache.Start(ctx) }()
	require.True(t, nsCache.WaitForCacheSync(ctx), "the injector's ServiceAccount lists and watches namespaces")

	ns := s.namespace(t, "psa-baseline", map[string]string{"kagenti.io/injection": "enabled", "pod-security.kubernetes.io/enforce": "baseline"})
	open := s.namespace(t, "psa-privileged", map[string]string{"kagenti.io/injection": "enabled"})
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, ok := s.levels.Enforced(ns)
		return ok, nil
	}), "the watch sees the namespace's label")

	var w warnings
	cfg := rest.CopyConfig(s.env.Config)
	cfg.WarningHandlerWithContext = &w
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	require.NoError(t, err)

	d := &appsv1.Deployment{ObjectMeta: meta(ns, "weather", labelled, nil), Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: userTemplate.Labels}, Template: *userTemplate.DeepCopy()}}
	require.NoError(t, c.Create(ctx, d), "the Deployment is admitted")
	require.Contains(t, d.Spec.Template.Annotations, inject.AnnotationStatus, "and injected")
	got := w.all()
	for _, text := range got {
		t.Logf("warning: %s", text)
	}
	ours := slices.IndexFunc(got, func(text string) bool { return strings.HasPrefix(text, "kagenti-injector: ") })
	require.GreaterOrEqual(t, ours, 0, "the injector's warning reaches the client: %q", got)
	require.Contains(t, got[ours], `kagenti-injector: namespace "psa-baseline" enforces Pod Security "baseline:latest", which forbids what is injected into Deployment "weather": `+
		`non-default capabilities (container "proxy-init" must not include "NET_ADMIN" in securityContext.capabilities.add)`)

	// What the API server does with its pods: refused, for the reason the warning gave. (envtest runs
	// no controller-manager: the namespace's default ServiceAccount is created here.)
	require.NoError(t, s.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weather-pod"}, Spec: d.Spec.Template.Spec}
	err = s.c.Create(ctx, pod, client.DryRunAll)
	require.True(t, apierrors.IsForbidden(err), "%v", err)
	require.Contains(t, err.Error(), `violates PodSecurity "baseline:latest": non-default capabilities (container "proxy-init" must not include "NET_ADMIN" in securityContext.capabilities.add)`)

	// A namespace that enforces nothing: no warning.
	before := len(w.all())
	d2 := &appsv1.Deployment{ObjectMeta: meta(open, "weather", labelled, nil), Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: userTemplate.Labels}, Template: *userTemplate.DeepCopy()}}
	require.NoError(t, c.Create(ctx, d2))
	for _, text := range w.all()[before:] {
		require.False(t, strings.HasPrefix(text, "kagenti-injector: "), "no warning where nothing is enforced: %s", text)
	}

	// Relabelling the namespace privileged (the documented fix) ends the warning.
	var n corev1.Namespace
	require.NoError(t, s.c.Get(ctx, client.ObjectKey{Name: ns}, &n))
	n.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
	require.NoError(t, s.c.Update(ctx, &n))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, ok := s.levels.Enforced(ns)
		return !ok, nil
	}))
	before = len(w.all())
	d.Labels["team"] = "weather"
	require.NoError(t, c.Update(ctx, d))
	for _, text := range w.all()[before:] {
		require.False(t, strings.HasPrefix(text, "kagenti-injector: "), "%s", text)
	}
}
