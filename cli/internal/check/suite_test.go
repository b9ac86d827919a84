package check

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kagenti/platform/cli/internal/kube"
)

// The tests of this package run `kagenti check` against one real kube-apiserver and etcd
// (envtest) with the CRDs of deploy/crds (agentbuild's is installed and removed by the test of the
// CRD lines), and make each line it can print come true on it.
var (
	testEnv *envtest.Environment
	testCfg *rest.Config
	admin   *kube.Clients
)

// repo is the repository root.
func repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

func runSuite(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: the check tests need kube-apiserver and etcd; set KUBEBUILDER_ASSETS to the repository's bin/ (the Makefile does)")
		return 1
	}
	var paths []string
	for _, p := range []string{"tokenexchange", "agenttrace", "agentcard"} {
		paths = append(paths, filepath.Join(repo(), "deploy", "crds", p))
	}
	testEnv = &envtest.Environment{CRDDirectoryPaths: paths, ErrorIfCRDPathMissing: true, ControlPlaneStartTimeout: 2 * time.Minute}
	cfg, err := testEnv.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	defer func() { _ = testEnv.Stop() }()
	testCfg = cfg
	if admin, err = kube.NewForConfig(cfg, nil); err != nil {
		fmt.Fprintf(os.Stderr, "clients: %v\n", err)
		return 1
	}
	return m.Run()
}

// clients are new clients of the test API server (a RESTMapper of their own: CRDs come and go).
func clients(t *testing.T) *kube.Clients {
	t.Helper()
	c, err := kube.NewForConfig(testCfg, nil)
	require.NoError(t, err)
	return c
}

var seq atomic.Int32

// uniqueName is name with a suffix of its own for this test process and run (-count runs again
// on the same API server, where namespaces are never deleted: envtest runs no namespace controller).
func uniqueName(name string) string {
	return fmt.Sprintf("%s-%d-%d", name, os.Getpid()%10000, seq.Add(1))
}

// installNamespace creates the namespace a test installs Kagenti in (Options.Namespace).
func installNamespace(t *testing.T) string {
	t.Helper()
	return createNamespace(t, uniqueName("kagenti"), nil)
}

func createNamespace(t *testing.T, name string, labels map[string]string) string {
	t.Helper()
	_, err := admin.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return name
}

// runCheck runs the check with c; unset options are: identity checks off, a 3 s probe timeout.
func runCheck(t *testing.T, c *kube.Clients, opts Options) []Result {
	t.Helper()
	if opts.Identity == "" {
		opts.Identity = "false"
	}
	if opts.Timeout == 0 {
		opts.Timeout = 3 * time.Second
	}
	require.NoError(t, opts.Validate())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return Run(ctx, c, opts)
}

// lines are the results as Write prints them, one string per check (the line, then its fix lines).
func lines(results []Result) []string {
	out := make([]string, len(results))
	for i, res := range results {
		var b strings.Builder
		_ = Write(&b, []Result{res}) // a strings.Builder takes every write
		out[i] = strings.SplitN(b.String(), "\n\n", 2)[0]
	}
	return out
}

// requireLine asserts that the report has a check printed starting with want (its mark, subject
// and the start of its detail), and returns it with its fix lines.
func requireLine(t *testing.T, results []Result, want string) string {
	t.Helper()
	all := lines(results)
	for _, l := range all {
		if strings.HasPrefix(l, want) {
			return l
		}
	}
	t.Fatalf("no line starts with\n  %s\nthe report:\n  %s", want, strings.Join(all, "\n  "))
	return ""
}

// requireNoLine asserts that no check's line starts with prefix.
func requireNoLine(t *testing.T, results []Result, prefix string) {
	t.Helper()
	for _, l := range lines(results) {
		require.False(t, strings.HasPrefix(l, prefix), "unexpected line %q", l)
	}
}

// asUser returns clients of a user of the test API server allowed rules only (RBAC, as the
// envtest API server authorizes).
func asUser(t *testing.T, rules ...rbacv1.PolicyRule) *kube.Clients {
	t.Helper()
	ctx := context.Background()
	name := uniqueName("check-user")
	u, err := testEnv.AddUser(envtest.User{Name: name}, testCfg)
	require.NoError(t, err)
	rbac := admin.Kube.RbacV1()
	_, err = rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	})
	c, err := kube.NewForConfig(u.Config(), nil)
	require.NoError(t, err)
	return c
}

func allow(group, resource string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, Verbs: verbs}
}

// readAll allows reading every resource (the rules a test then leaves out are what it checks).
func readAll(groupResources ...string) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, gr := range groupResources {
		group, resource, _ := strings.Cut(gr, "/")
		out = append(out, allow(group, resource, "get", "list", "watch"))
	}
	return out
}

// deployment creates the Deployment name in ns with replicas (0: ready at once, there being no
// controller; 1: never ready) and args for its one container.
func deployment(t *testing.T, ns, name string, replicas int32, args ...string) *appsv1.Deployment {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "kagenti:test", Args: args}}},
			},
		},
	}
	got, err := admin.Kube.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{})
	require.NoError(t, err)
	return got
}

// reconcileProbes writes a status on every probe of gvk until the test ends, as that pillar's
// controller does: status.observedGeneration (and, with netpol, netpol's NetworkPolicyReady).
func reconcileProbes(t *testing.T, gvk schema.GroupVersionKind, netpol bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ri, _, err := clients(t).Resource(gvk, "")
	require.NoError(t, err)
	go func() {
		done := map[string]bool{} // by UID: the CRD's schema may default a status on create
		for ctx.Err() == nil {
			list, err := ri.List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=" + managedBy})
			if err == nil {
				for i := range list.Items {
					u := &list.Items[i]
					if done[string(u.GetUID())] {
						continue
					}
					status := map[string]any{"observedGeneration": u.GetGeneration()}
					if netpol {
						status = map[string]any{"conditions": []any{map[string]any{
							"type": "NetworkPolicyReady", "status": "False", "reason": "TargetNotFound", "message": "probe",
							"observedGeneration": u.GetGeneration(), "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
						}}}
					}
					u.Object["status"] = status
					_, err = admin.Dynamic.Resource(schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: strings.ToLower(gvk.Kind) + "s"}).
						Namespace(u.GetNamespace()).UpdateStatus(ctx, u, metav1.UpdateOptions{})
					done[string(u.GetUID())] = err == nil
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// deleteLater deletes a cluster-scoped or namespaced object when the test ends (errors ignored:
// it may be gone).
func deleteLater(t *testing.T, f func(ctx context.Context) error) {
	t.Cleanup(func() {
		if err := f(context.Background()); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("cleanup: %v", err)
		}
	})
}
