package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The tests of the clients run against one real kube-apiserver and etcd (envtest), reached through
// a kubeconfig file as kubectl's flags read it.
var (
	testEnv *envtest.Environment
	testCfg *rest.Config
)

func repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

func runSuite(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: the kube tests need kube-apiserver and etcd; set KUBEBUILDER_ASSETS to the repository's bin/ (the Makefile does)")
		return 1
	}
	testEnv = &envtest.Environment{ControlPlaneStartTimeout: 2 * time.Minute}
	cfg, err := testEnv.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	defer func() { _ = testEnv.Stop() }()
	testCfg = cfg
	return m.Run()
}

var (
	namespaceGVK  = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	configMapGVK  = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	agentBuildGVK = schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentBuild"}
)

// kubeconfig writes a kubeconfig file for an admin of the test API server and returns its path.
func kubeconfig(t *testing.T) string {
	t.Helper()
	u, err := testEnv.AddUser(envtest.User{Name: "kube-test-admin", Groups: []string{"system:masters"}}, testCfg)
	require.NoError(t, err)
	raw, err := u.KubeConfig()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	return path
}

func flagsFor(path string) *genericclioptions.ConfigFlags {
	f := genericclioptions.NewConfigFlags(true)
	f.KubeConfig = &path
	return f
}

func newNamespace(t *testing.T, c *Clients) string {
	t.Helper()
	ns, err := c.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kube-test-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return ns.Name
}

// New reads kubectl's flags (--kubeconfig here) and every client it builds reaches the cluster.
func TestNewFromKubeconfigFlags(t *testing.T) {
	c, err := New(flagsFor(kubeconfig(t)))
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSuffix(testCfg.Host, "/"), strings.TrimSuffix(c.Config.Host, "/"), "the cluster of the kubeconfig")
	ctx := context.Background()
	ns := newNamespace(t, c)

	got, err := c.Get(ctx, namespaceGVK, "", ns)
	require.NoError(t, err, "dynamic client and RESTMapper")
	assert.Equal(t, ns, got.GetName())
	_, err = c.Discovery.ServerVersion()
	require.NoError(t, err, "discovery")
	_, err = c.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "typed client")
}

// A kubeconfig that is missing or names an unknown context is an error naming it, not clients of
// some other cluster.
func TestNewRefusesABadKubeconfig(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	_, err := New(flagsFor(missing))
	require.Error(t, err)
	assert.Contains(t, err.Error(), missing)

	f := flagsFor(kubeconfig(t))
	other := "no-such-context"
	f.Context = &other
	_, err = New(f)
	require.Error(t, err)
	assert.Contains(t, err.Error(), other)
}

// The clients get the CLI's rate limits when the config has none, keep the config's own otherwise,
// and never change the caller's config.
func TestNewForConfigRateLimits(t *testing.T) {
	cfg := rest.CopyConfig(testCfg)
	cfg.QPS, cfg.Burst = 0, 0
	c, err := NewForConfig(cfg, nil)
	require.NoError(t, err)
	assert.Equal(t, float32(50), c.Config.QPS)
	assert.Equal(t, 100, c.Config.Burst)
	assert.Zero(t, cfg.QPS, "the caller's config is copied, not changed")

	cfg.QPS, cfg.Burst = 7, 9
	c, err = NewForConfig(cfg, nil)
	require.NoError(t, err)
	assert.Equal(t, float32(7), c.Config.QPS)
	assert.Equal(t, 9, c.Config.Burst)
}

// Resource scopes a namespaced kind to the namespace and ignores it for a cluster-scoped one;
// a kind the cluster does not serve is a NoKindMatch error.
func TestResourceScopesAndUnservedKinds(t *testing.T) {
	c, err := NewForConfig(testCfg, nil)
	require.NoError(t, err)
	ctx := context.Background()
	ns := newNamespace(t, c)
	_, err = c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	_, mapping, err := c.Resource(configMapGVK, ns)
	require.NoError(t, err)
	assert.Equal(t, meta.RESTScopeNameNamespace, mapping.Scope.Name())
	got, err := c.Get(ctx, configMapGVK, ns, "settings")
	require.NoError(t, err)
	assert.Equal(t, ns, got.GetNamespace())
	_, err = c.Get(ctx, configMapGVK, "default", "settings")
	require.Error(t, err, "read in the namespace named, not another")

	_, mapping, err = c.Resource(namespaceGVK, "ignored")
	require.NoError(t, err)
	assert.Equal(t, meta.RESTScopeNameRoot, mapping.Scope.Name())
	_, err = c.Get(ctx, namespaceGVK, "ignored", ns)
	require.NoError(t, err, "a cluster-scoped kind ignores the namespace")

	_, err = c.Get(ctx, schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "NoSuchKind"}, ns, "x")
	require.Error(t, err)
	assert.True(t, meta.IsNoMatchError(err), "%v", err)
	_, err = c.List(ctx, schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "NoSuchKind"}, ns, metav1.ListOptions{})
	assert.True(t, meta.IsNoMatchError(err), "%v", err)
}

// List follows the API server's pages to the end.
func TestListFollowsPages(t *testing.T) {
	c, err := NewForConfig(testCfg, nil)
	require.NoError(t, err)
	ctx := context.Background()
	ns := newNamespace(t, c)
	for i := range 5 {
		_, err := c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("page-%d", i), Labels: map[string]string{"kagenti.io/test": "pages"}}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	items, err := c.List(ctx, configMapGVK, ns, metav1.ListOptions{LabelSelector: "kagenti.io/test=pages", Limit: 2})
	require.NoError(t, err)
	var names []string
	for _, u := range items {
		names = append(names, u.GetName())
	}
	assert.Equal(t, []string{"page-0", "page-1", "page-2", "page-3", "page-4"}, names)
}

// A CRD installed while the clients run is served once ResetMapper forgets the cached discovery,
// with the mapper built from the config and with kubectl's.
func TestServedAfterACRDIsInstalled(t *testing.T) {
	fromConfig, err := NewForConfig(testCfg, nil)
	require.NoError(t, err)
	fromFlags, err := New(flagsFor(kubeconfig(t)))
	require.NoError(t, err)
	crds := envtest.CRDInstallOptions{Paths: []string{filepath.Join(repo(), "deploy", "crds", "agentbuild")}, ErrorIfPathMissing: true}
	require.NoError(t, envtest.UninstallCRDs(testCfg, crds))
	require.Eventually(t, func() bool {
		fromConfig.ResetMapper()
		return !fromConfig.Served(agentBuildGVK)
	}, time.Minute, 100*time.Millisecond, "the CRD of an earlier run is still served")
	fromFlags.ResetMapper()
	assert.False(t, fromFlags.Served(agentBuildGVK))
	assert.True(t, fromConfig.Served(configMapGVK))

	_, err = envtest.InstallCRDs(testCfg, crds)
	require.NoError(t, err)
	t.Cleanup(func() { _ = envtest.UninstallCRDs(testCfg, crds) })
	for name, c := range map[string]*Clients{"config": fromConfig, "flags": fromFlags} {
		c.ResetMapper()
		assert.True(t, c.Served(agentBuildGVK), "mapper from %s", name)
		ri, _, err := c.Resource(agentBuildGVK, "default")
		require.NoError(t, err, name)
		_, err = ri.List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err, name)
	}
}
