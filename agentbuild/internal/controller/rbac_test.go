package controller

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/pkg/duck"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/templates"
	"github.com/kagenti/platform/agentbuild/internal/testsupport"
)

// TestShippedRBACScopesBuilds runs the controller as its ServiceAccount with the RBAC of the
// kustomize base, and ClusterRole kagenti-agentbuild-builder bound in one namespace, as
// docs/security.md tells the platform engineer: there a build runs and deployTo patches its
// Deployment; in kube-system, where nothing is bound, no Pipeline or PipelineRun is created and the
// ServiceAccount cannot patch the Deployment.
func TestShippedRBACScopesBuilds(t *testing.T) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.ErrorLevel)))
	testEnv := &envtest.Environment{
		CRDDirectoryPaths:        []string{testsupport.CRDDir(), testsupport.TektonCRDDir(t)},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: testsupport.ControlPlaneStartTimeout,
		BinaryAssetsDirectory:    testsupport.Assets(t),
	}
	cfg, err := testEnv.Start()
	require.NoError(t, err, "starting envtest (KUBEBUILDER_ASSETS=%s)", testEnv.BinaryAssetsDirectory)
	t.Cleanup(func() { _ = testEnv.Stop() })
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	require.NoError(t, pipelinev1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	e := &env{t: t, cfg: cfg, c: c, scheme: scheme}
	ctx := context.Background()

	e.namespace(templates.DefaultNamespace)
	for _, cm := range testsupport.DefaultTemplates(t, templates.DefaultNamespace) {
		require.NoError(t, c.Create(ctx, cm))
	}
	installShippedRBAC(t, c, filepath.Join(testEnv.BinaryAssetsDirectory, "kubectl"))
	const sa = "kagenti-agentbuild"
	allowed := e.namespace("team-a")
	require.NoError(t, c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: allowed, Name: "kagenti-agentbuild-builder"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kagenti-agentbuild-builder"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: templates.DefaultNamespace, Name: sa}},
	}))

	saCfg := asServiceAccount(cfg, templates.DefaultNamespace, sa)
	e.opts = Options{TemplateNamespace: templates.DefaultNamespace, TektonCheckInterval: 200 * time.Millisecond, TemplateRetryInterval: 200 * time.Millisecond}
	e.mgr, err = ctrl.NewManager(saCfg, ctrl.Options{
		Scheme:                 controllerScheme(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	require.NoError(t, err)
	require.NoError(t, Setup(e.mgr, e.opts))
	mgrCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); assert.NoError(t, e.mgr.Start(mgrCtx)) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	deployTo := &v1alpha1.DeployTo{TargetRef: duck.TargetRef{Kind: "Deployment", Name: "agent"}, Container: "agent"}

	// Where the builder role is bound: the build runs and its image is deployed.
	dep := e.createDeployment(allowed, "agent")
	b := e.createBuild(allowed, "agent", deployTo)
	e.setSucceeded(e.waitRun(allowed, "agent-1"), devImg+":latest", digestA)
	e.waitCondition(b, v1alpha1.ConditionDeployed, metav1.ConditionTrue, v1alpha1.ReasonImageDeployed)
	got := &appsv1.Deployment{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), got))
	assert.Equal(t, devImg+"@"+digestA, got.Spec.Template.Spec.Containers[0].Image)

	// kube-system: nothing is bound, nothing is created, the build says why and what to bind, and
	// the deployTo patch itself is refused.
	sysDep := e.createDeployment("kube-system", "agent")
	sysBuild := e.createBuild("kube-system", "agent", deployTo)
	ready := e.waitCondition(sysBuild, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonBuildNotPermitted)
	assert.Contains(t, ready.Message, "may not build in namespace kube-system")
	assert.Contains(t, ready.Message, "bind ClusterRole kagenti-agentbuild-builder there")
	stalled := e.waitCondition(sysBuild, duck.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonBuildNotPermitted)
	assert.Equal(t, ready.Message, stalled.Message)
	e.consistently(func() bool {
		runs := &pipelinev1.PipelineRunList{}
		pipelines := &pipelinev1.PipelineList{}
		require.NoError(t, c.List(ctx, runs, client.InNamespace("kube-system")))
		require.NoError(t, c.List(ctx, pipelines, client.InNamespace("kube-system")))
		return len(runs.Items) == 0 && len(pipelines.Items) == 0
	})
	saClient, err := client.New(saCfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	patch, err := imagePatch("/spec/template/spec/containers/0", "agent", devImg+"@"+digestA)
	require.NoError(t, err)
	err = saClient.Patch(ctx, sysDep, client.RawPatch(types.JSONPatchType, patch))
	assert.True(t, apierrors.IsForbidden(err), "patching a Deployment in kube-system as %s: %v", sa, err)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(sysDep), got))
	assert.Equal(t, "example.com/weather-agent:old", got.Spec.Template.Spec.Containers[0].Image)
}

// installShippedRBAC creates the ServiceAccount, Roles, ClusterRoles and bindings of the agentbuild
// kustomize base, rendered by kubectl kustomize as installed.
func installShippedRBAC(t *testing.T, c client.Client, kubectl string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", filepath.Join(testsupport.RepoRoot(), "deploy", "kustomize", "agentbuild"))
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "kubectl kustomize: %s", errOut.String())
	kinds := map[string]bool{"ServiceAccount": true, "Role": true, "ClusterRole": true, "RoleBinding": true, "ClusterRoleBinding": true}
	dec := yaml.NewYAMLOrJSONDecoder(&out, 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if kinds[u.GetKind()] {
			require.NoError(t, c.Create(context.Background(), u), "%s %s", u.GetKind(), u.GetName())
		}
	}
}

// asServiceAccount is cfg impersonating ServiceAccount ns/name.
func asServiceAccount(cfg *rest.Config, ns, name string) *rest.Config {
	sa := rest.CopyConfig(cfg)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name}
	return sa
}
