package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"knative.dev/pkg/apis"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/ducktest"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/resources"
	"github.com/kagenti/platform/agentbuild/internal/tekton"
	"github.com/kagenti/platform/agentbuild/internal/templates"
	"github.com/kagenti/platform/agentbuild/internal/testsupport"
)

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	devImg  = "registry.kagenti-system.svc.cluster.local:5000/kagenti/weather-agent"
)

type env struct {
	t      *testing.T
	cfg    *rest.Config
	c      client.Client
	scheme *runtime.Scheme
	mgr    ctrl.Manager
	opts   Options
	// reconciler is the manager's; its Loader reads the template cache.
	reconciler *Reconciler
	// tektonInstalled: Tekton's CRDs are served (installTekton ran).
	tektonInstalled bool
}

// TestIntegration runs the controller against a real kube-apiserver. It starts WITHOUT Tekton's
// CRDs (to see TektonNotInstalled and the recovery), installs them, then plays Tekton's part by
// writing PipelineRun status.
func TestIntegration(t *testing.T) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.ErrorLevel)))
	testEnv := &envtest.Environment{
		CRDDirectoryPaths:        []string{testsupport.CRDDir()},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: testsupport.ControlPlaneStartTimeout,
		BinaryAssetsDirectory:    testsupport.Assets(t),
	}
	cfg, err := testEnv.Start()
	require.NoError(t, err, "starting envtest (KUBEBUILDER_ASSETS=%s)", testEnv.BinaryAssetsDirectory)
	t.Cleanup(func() { _ = testEnv.Stop() })

	// The test reads and writes Tekton's objects with Tekton's own types; the controller with its
	// own (internal/tekton), as the binary does.
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	require.NoError(t, pipelinev1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	e := &env{t: t, cfg: cfg, c: c, scheme: scheme}

	e.namespace(templates.DefaultNamespace)
	for _, cm := range testsupport.DefaultTemplates(t, templates.DefaultNamespace) {
		require.NoError(t, c.Create(context.Background(), cm))
	}
	e.opts = Options{TemplateNamespace: templates.DefaultNamespace, TektonCheckInterval: 200 * time.Millisecond, TemplateRetryInterval: 200 * time.Millisecond}
	e.mgr, err = ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 controllerScheme(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  CacheOptions(nil), // as the binary: runs trimmed in the cache
	})
	require.NoError(t, err)
	e.reconciler, err = setup(e.mgr, e.opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); assert.NoError(t, e.mgr.Start(ctx)) }()
	t.Cleanup(func() { cancel(); wg.Wait() })

	// Order matters: the first subtest installs Tekton's CRDs. When -run leaves it out, they are
	// installed here, so that any one subtest can be run alone.
	run := func(name string, f func(t *testing.T)) bool {
		return t.Run(name, func(t *testing.T) { e.t = t; f(t) })
	}
	if !run("TektonNotInstalledThenRecovers", e.testTektonRecovery) {
		return
	}
	e.t = t
	e.installTekton()
	run("Workers", e.testWorkers) // the controller has started: it reconciled
	run("Validation", e.testValidation)
	run("SucceedsAndDeploys", e.testSucceedsAndDeploys)
	run("Fails", e.testFails)
	run("TargetNotFoundRecovers", e.testTargetNotFoundRecovers)
	run("ContainerNotFound", e.testContainerNotFound)
	run("NoDuplicateRuns", e.testNoDuplicateRuns)
	run("NewGenerationCancelsAndPrunes", e.testNewGenerationCancelsAndPrunes)
	run("TemplateProblemsRecover", e.testTemplateProblems)
	run("TemplateChangeReachesNextGeneration", e.testTemplateChange)
	run("CleanupAfterBuild", e.testCleanup)
	run("KstatusVerdicts", e.testVerdicts)
	run("StaleCacheWritesNothing", e.testStaleCacheWritesNothing)
}

// testWorkers: AgentBuilds are reconciled DefaultMaxConcurrentReconciles at a time, not one after
// another (controller-runtime's own gauge of the controller's workers).
func (e *env) testWorkers(t *testing.T) {
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	workers := -1.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_max_concurrent_reconciles" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "agentbuild" {
					workers = m.GetGauge().GetValue()
				}
			}
		}
	}
	assert.Equal(t, float64(DefaultMaxConcurrentReconciles), workers)
}

func (e *env) testTektonRecovery(t *testing.T) {
	ns := e.namespace("recovery")
	b := e.createBuild(ns, "weather-agent", nil)
	e.waitCondition(b, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTektonNotInstalled)
	got := e.build(b)
	assert.Equal(t, v1alpha1.PhasePending, got.Status.Phase)
	assert.Empty(t, got.Status.PipelineRunName)
	e.assertVerdict(b, kstatus.FailedStatus, "Degraded", "Tekton not installed")

	e.installTekton()
	run := e.waitRun(ns, "weather-agent-1")
	e.waitCondition(b, v1alpha1.ConditionTemplateResolved, metav1.ConditionTrue, v1alpha1.ReasonResolved)
	e.waitCondition(b, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonBuilding)
	assert.Equal(t, v1alpha1.PhasePending, e.build(b).Status.Phase)
	e.assertVerdict(b, kstatus.InProgressStatus, "Progressing", "recovered: building")

	// The run is owned by the build, binds a fresh volume for the source and refers to its Pipeline.
	assert.True(t, metav1.IsControlledBy(run, e.build(b)))
	require.NotEmpty(t, run.Spec.Workspaces)
	assert.Equal(t, resources.WorkspaceSource, run.Spec.Workspaces[0].Name)
	require.NotNil(t, run.Spec.Workspaces[0].VolumeClaimTemplate)
	p := &pipelinev1.Pipeline{}
	require.NoError(t, e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: run.Spec.PipelineRef.Name}, p))
	assert.True(t, metav1.IsControlledBy(p, e.build(b)))
	assert.Len(t, p.Spec.Tasks, 2)

	// The manager kept running the whole time: the PipelineRun watch is live now.
	e.setRunning(run)
	e.waitPhase(b, v1alpha1.PhaseBuilding)
}

func (e *env) testValidation(t *testing.T) {
	ns := e.namespace("validation")
	tests := []struct {
		name   string
		mutate func(*v1alpha1.AgentBuild)
		want   string
	}{
		{"custom without steps", func(b *v1alpha1.AgentBuild) { b.Spec.Mode = v1alpha1.ModeCustom },
			"spec.pipeline: Invalid value: custom mode needs at least one step in spec.pipeline.steps"},
		{"custom step without configMap", func(b *v1alpha1.AgentBuild) {
			b.Spec.Mode = v1alpha1.ModeCustom
			b.Spec.Pipeline = &v1alpha1.PipelineSpec{Steps: []v1alpha1.PipelineStep{{Name: "build"}}}
		}, "spec.pipeline.steps: Invalid value: every step of a custom pipeline needs configMap"},
		{"duplicate step names", func(b *v1alpha1.AgentBuild) {
			b.Spec.Pipeline = &v1alpha1.PipelineSpec{Steps: []v1alpha1.PipelineStep{{Name: "scan", ConfigMap: "a"}, {Name: "scan", ConfigMap: "b"}}}
		}, "spec.pipeline.steps[1]: Duplicate value: {\"name\":\"scan\"}"},
		{"image with upper case", func(b *v1alpha1.AgentBuild) { b.Spec.BuildOutput.Image = "Kagenti/Weather" },
			"spec.buildOutput.image: Invalid value: \"Kagenti/Weather\": spec.buildOutput.image in body should match"},
		{"bad tag", func(b *v1alpha1.AgentBuild) { b.Spec.BuildOutput.Tag = "v1:2" },
			"spec.buildOutput.tag: Invalid value: \"v1:2\""},
		{"dev-external without registry", func(b *v1alpha1.AgentBuild) { b.Spec.Mode = v1alpha1.ModeDevExternal },
			"spec.buildOutput.registry: Invalid value: dev-external mode pushes to an external registry"},
		{"subfolder escaping the repository", func(b *v1alpha1.AgentBuild) { b.Spec.Source.Subfolder = "a/../../etc" },
			"spec.source.subfolder: Invalid value: \"a/../../etc\": must be a relative path without '..'"},
		{"repository not a URL", func(b *v1alpha1.AgentBuild) { b.Spec.Source.Repository = "github.com/x/y" },
			"spec.source.repository: Invalid value: \"github.com/x/y\": must be an http(s)://, ssh:// or git@ URL"},
		{"unknown mode", func(b *v1alpha1.AgentBuild) { b.Spec.Mode = "fast" },
			"spec.mode: Unsupported value: \"fast\""},
		{"history limit zero", func(b *v1alpha1.AgentBuild) { b.Spec.HistoryLimit = ptr.To[int32](0) },
			"spec.historyLimit: Invalid value: 0: spec.historyLimit in body should be greater than or equal to 1"},
		{"revision that is a git option", func(b *v1alpha1.AgentBuild) { b.Spec.Source.Revision = "--upload-pack=x" },
			"spec.source.revision: Invalid value: \"--upload-pack=x\": must not start with '-': git would read it as an option"},
		{"revision with a space", func(b *v1alpha1.AgentBuild) { b.Spec.Source.Revision = "main; rm -rf /" },
			"spec.source.revision: Invalid value: \"main; rm -rf /\": must not contain whitespace"},
		{"revision with a control character", func(b *v1alpha1.AgentBuild) { b.Spec.Source.Revision = "main\n" },
			"spec.source.revision: Invalid value: \"main\\n\": must not contain whitespace, control characters"},
		{"revision with ..", func(b *v1alpha1.AgentBuild) { b.Spec.Source.Revision = "main..dev" },
			"spec.source.revision: Invalid value: \"main..dev\": must not contain '..'"},
		{"revision ending in .lock", func(b *v1alpha1.AgentBuild) { b.Spec.Source.Revision = "refs/heads/x.lock" },
			"spec.source.revision: Invalid value: \"refs/heads/x.lock\": must not start or end with '/'"},
		{"revision too long", func(b *v1alpha1.AgentBuild) { b.Spec.Source.Revision = strings.Repeat("a", 256) },
			"spec.source.revision: Too long: may not be more than 255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBuild(ns, "invalid", nil)
			tt.mutate(b)
			err := e.c.Create(context.Background(), b)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "%v", err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	// Branches, tags, pull-request refs and commits are accepted.
	for _, rev := range []string{"main", "v1.2.0", "feature/login-form", "refs/pull/42/head", "release-1.x_rc+1",
		"5fb4cc826acc136bd14a8c5108b29577be1f068c"} {
		b := newBuild(ns, "revision", nil)
		b.Spec.Source.Revision = rev
		assert.NoError(t, e.c.Create(context.Background(), b, client.DryRunAll), "revision %q", rev)
	}
	// Defaults come from the schema.
	b := e.createBuild(ns, "defaults", nil)
	got := e.build(b)
	assert.Equal(t, v1alpha1.ModeDev, got.Spec.Mode)
	assert.Equal(t, "main", got.Spec.Source.Revision)
	assert.Equal(t, "latest", got.Spec.BuildOutput.Tag)
	assert.Equal(t, ptr.To(true), got.Spec.CleanupAfterBuild)
	assert.Equal(t, ptr.To[int32](3), got.Spec.HistoryLimit)
}

func (e *env) testSucceedsAndDeploys(t *testing.T) {
	ns := e.namespace("succeeds")
	dep := e.createDeployment(ns, "weather-agent")
	b := e.createBuild(ns, "weather-agent", &v1alpha1.DeployTo{TargetRef: duck.TargetRef{Kind: "Deployment", Name: "weather-agent"}, Container: "agent"})
	run := e.waitRun(ns, "weather-agent-1")
	e.waitCondition(b, v1alpha1.ConditionDeployed, metav1.ConditionUnknown, v1alpha1.ReasonAwaitingBuild)
	e.setRunning(run)
	e.waitPhase(b, v1alpha1.PhaseBuilding)
	e.setSucceeded(run, devImg+":latest", digestA)
	e.waitPhase(b, v1alpha1.PhaseSucceeded)
	e.waitCondition(b, v1alpha1.ConditionDeployed, metav1.ConditionTrue, v1alpha1.ReasonImageDeployed)
	e.waitCondition(b, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonBuildSucceeded)
	// Events: the run started, Ready became True. Ready's first value (False, Building) is none:
	// BuildStarted already said it.
	require.True(t, e.hasEvent(ns, v1alpha1.ReasonBuildSucceeded) && e.hasEvent(ns, v1alpha1.ReasonImageDeployed) && e.hasEvent(ns, "BuildStarted"))
	assert.Equal(t, []string{"BuildStarted", v1alpha1.ReasonBuildSucceeded, "ImageDeployed"}, e.eventReasons(ns))

	got := e.build(b)
	assert.Equal(t, devImg+"@"+digestA, got.Status.BuiltImage)
	assert.Equal(t, "weather-agent-1", got.Status.PipelineRunName)
	assert.NotNil(t, got.Status.LastBuildTime)
	assert.NotNil(t, got.Status.CompletionTime)
	assert.Equal(t, got.Generation, got.Status.ObservedGeneration)
	assert.Equal(t, &v1alpha1.DeploymentStatus{Target: "Deployment.apps/weather-agent", Container: "agent", Image: devImg + "@" + digestA}, got.Status.Deployment)
	succeeded := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionSucceeded)
	require.NotNil(t, succeeded)
	assert.Equal(t, metav1.ConditionTrue, succeeded.Status)

	// Only the named container's image changed.
	after := &appsv1.Deployment{}
	require.NoError(t, e.c.Get(context.Background(), client.ObjectKeyFromObject(dep), after))
	assert.Equal(t, devImg+"@"+digestA, after.Spec.Template.Spec.Containers[0].Image)
	want := dep.Spec.Template.Spec.DeepCopy()
	want.Containers[0].Image = devImg + "@" + digestA
	assert.Equal(t, *want, after.Spec.Template.Spec, "deployTo must only change the agent container's image")

	// Status is written by server-side apply with the controller's field manager.
	managers := map[string]bool{}
	for _, mf := range got.ManagedFields {
		if mf.Subresource == "status" {
			managers[mf.Manager] = true
		}
	}
	assert.True(t, managers[fieldOwner], "status field managers: %v", managers)

	// A user changing the image afterwards is not overridden (the image was deployed once).
	after.Spec.Template.Spec.Containers[0].Image = "example.com/hotfix:1"
	require.NoError(t, e.c.Update(context.Background(), after))
	e.touch(b)
	e.consistently(func() bool {
		d := &appsv1.Deployment{}
		require.NoError(t, e.c.Get(context.Background(), client.ObjectKeyFromObject(dep), d))
		return d.Spec.Template.Spec.Containers[0].Image == "example.com/hotfix:1"
	})
}

func (e *env) testFails(t *testing.T) {
	ns := e.namespace("fails")
	b := e.createBuild(ns, "weather-agent", nil)
	run := e.waitRun(ns, "weather-agent-1")
	e.setRunning(run)
	e.setStatus(run, corev1.ConditionFalse, "Failed", "Tasks Completed: 2 (Failed: 1, Cancelled 0), Skipped: 0", nil)
	e.waitPhase(b, v1alpha1.PhaseFailed)
	e.waitCondition(b, v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonBuildFailed)
	e.waitCondition(b, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonBuildFailed)
	assert.Contains(t, e.build(b).Status.Message, "PipelineRun weather-agent-1 failed: Failed: Tasks Completed: 2 (Failed: 1")
	assert.Empty(t, e.build(b).Status.BuiltImage)

	// A run that succeeds without a digest result is a failure of the build, named as such.
	b2 := e.createBuild(ns, "no-digest", nil)
	run2 := e.waitRun(ns, "no-digest-1")
	e.setStatus(run2, corev1.ConditionTrue, "Succeeded", "", []pipelinev1.PipelineRunResult{
		{Name: "IMAGE_URL", Value: *pipelinev1.NewStructuredValues(devImg + ":latest")}})
	e.waitCondition(b2, v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonMissingImageResult)
}

func (e *env) testTargetNotFoundRecovers(t *testing.T) {
	ns := e.namespace("target")
	b := e.createBuild(ns, "weather-agent", &v1alpha1.DeployTo{TargetRef: duck.TargetRef{Kind: "Deployment", Name: "weather-agent"}, Container: "agent"})
	run := e.waitRun(ns, "weather-agent-1")
	e.setSucceeded(run, devImg+":latest", digestB)
	e.waitCondition(b, v1alpha1.ConditionDeployed, metav1.ConditionFalse, duck.ReasonTargetNotFound)
	e.waitCondition(b, v1alpha1.ConditionReady, metav1.ConditionFalse, duck.ReasonTargetNotFound)
	assert.Equal(t, v1alpha1.PhaseSucceeded, e.build(b).Status.Phase)

	dep := e.createDeployment(ns, "weather-agent") // the watch on Deployments re-queues the build
	e.waitCondition(b, v1alpha1.ConditionDeployed, metav1.ConditionTrue, v1alpha1.ReasonImageDeployed)
	e.waitCondition(b, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonBuildSucceeded)
	after := &appsv1.Deployment{}
	require.NoError(t, e.c.Get(context.Background(), client.ObjectKeyFromObject(dep), after))
	assert.Equal(t, devImg+"@"+digestB, after.Spec.Template.Spec.Containers[0].Image)
}

func (e *env) testContainerNotFound(t *testing.T) {
	ns := e.namespace("container")
	e.createDeployment(ns, "weather-agent")
	b := e.createBuild(ns, "weather-agent", &v1alpha1.DeployTo{TargetRef: duck.TargetRef{Kind: "Deployment", Name: "weather-agent"}, Container: "missing"})
	e.setSucceeded(e.waitRun(ns, "weather-agent-1"), devImg+":latest", digestA)
	c := e.waitCondition(b, v1alpha1.ConditionDeployed, metav1.ConditionFalse, v1alpha1.ReasonContainerNotFound)
	assert.Equal(t, `Deployment "weather-agent" has no container "missing" (it has: agent, sidecar)`, c.Message)
}

func (e *env) testNoDuplicateRuns(t *testing.T) {
	ns := e.namespace("duplicates")
	b := e.createBuild(ns, "weather-agent", nil)
	e.waitRun(ns, "weather-agent-1")
	// A second reconciler (as after a restart or a lost cache) reconciling concurrently and
	// repeatedly finds the same run.
	r := newReconciler(e.mgr, e.opts, e.reconciler.Loader.Reader)
	r.Tekton.watching = true
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	// Metadata changes do not bump the generation and start nothing.
	e.touch(b)
	e.consistently(func() bool { return len(e.runs(ns, e.build(b))) == 1 })
}

func (e *env) testNewGenerationCancelsAndPrunes(t *testing.T) {
	ns := e.namespace("history")
	b := newBuild(ns, "weather-agent", nil)
	b.Spec.HistoryLimit = ptr.To[int32](2)
	require.NoError(t, e.c.Create(context.Background(), b))
	run1 := e.waitRun(ns, "weather-agent-1")
	e.setRunning(run1)

	// A spec change is a new generation: a new run, and the superseded running one is cancelled.
	e.updateSpec(b, func(b *v1alpha1.AgentBuild) { b.Spec.BuildOutput.Tag = "v2" })
	e.waitRun(ns, "weather-agent-2")
	e.waitFor("run 1 cancelled", func() (bool, string) {
		r := &pipelinev1.PipelineRun{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(run1), r); err != nil {
			return false, err.Error()
		}
		return r.Spec.Status == pipelinev1.PipelineRunSpecStatusCancelled, string(r.Spec.Status)
	})
	for gen := 3; gen <= 4; gen++ {
		e.updateSpec(b, func(b *v1alpha1.AgentBuild) { b.Spec.BuildOutput.Tag = fmt.Sprintf("v%d", gen) })
		e.waitRun(ns, fmt.Sprintf("weather-agent-%d", gen))
	}
	e.waitFor("history pruned to 2 runs", func() (bool, string) {
		var names []string
		for _, r := range e.runs(ns, e.build(b)) {
			names = append(names, r.Name)
		}
		return strings.Join(names, ",") == "weather-agent-3,weather-agent-4", strings.Join(names, ",")
	})
	for _, gone := range []string{"weather-agent-1", "weather-agent-2"} {
		err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: gone}, &pipelinev1.Pipeline{})
		assert.True(t, apierrors.IsNotFound(err), "Pipeline %s should be pruned with its run: %v", gone, err)
	}
	// A reconcile prunes before it applies its status, and a status computed from a copy older
	// than the latest spec update is refused as stale and retried: runs 3 and 4 can be all that is
	// left while the status still names an older run. The status is awaited, not read once.
	e.waitFor("status of generation 4", func() (bool, string) {
		got := e.build(b)
		return got.Status.ObservedGeneration == 4 && got.Status.PipelineRunName == "weather-agent-4",
			fmt.Sprintf("observedGeneration %d, pipelineRunName %s", got.Status.ObservedGeneration, got.Status.PipelineRunName)
	})
	// The new run's IMAGE carries the new tag.
	p := &pipelinev1.Pipeline{}
	require.NoError(t, e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "weather-agent-4"}, p))
	assert.Contains(t, paramValue(p, "build", "IMAGE"), "weather-agent:v4")
}

func (e *env) testTemplateProblems(t *testing.T) {
	ns := e.namespace("templates")
	b := newBuild(ns, "custom", nil)
	b.Spec.Mode = v1alpha1.ModeCustom
	b.Spec.Pipeline = &v1alpha1.PipelineSpec{Steps: []v1alpha1.PipelineStep{{Name: "build", ConfigMap: "my-build-step"}}}
	require.NoError(t, e.c.Create(context.Background(), b))
	c := e.waitCondition(b, v1alpha1.ConditionTemplateResolved, metav1.ConditionFalse, v1alpha1.ReasonStepNotFound)
	assert.Equal(t, "ConfigMap my-build-step (step build) labelled kagenti.io/build-template=true not found in namespace templates or kagenti-system", c.Message)
	e.waitCondition(b, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTemplateNotResolved)
	assert.Equal(t, v1alpha1.PhasePending, e.build(b).Status.Phase)
	assert.True(t, e.hasEvent(ns, v1alpha1.ReasonStepNotFound))

	// The team ships its step, first without the label: it is not a step, and the condition keeps
	// saying which label to add.
	step := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "my-build-step"}, Data: map[string]string{templates.TaskSpecKey: `
params: [{name: IMAGE}, {name: BUILDER_POOL}]
results: [{name: IMAGE_URL}, {name: IMAGE_DIGEST}]
steps: [{name: build, image: "busybox:1.37", script: "true"}]
`}}
	require.NoError(t, e.c.Create(context.Background(), step))
	e.consistently(func() bool {
		c := e.build(b).Status.Condition(v1alpha1.ConditionTemplateResolved)
		return c != nil && c.Reason == v1alpha1.ReasonStepNotFound
	})
	// With the label it is read; it declares a parameter nobody sets.
	step.Labels = map[string]string{templates.Label: templates.LabelValue}
	require.NoError(t, e.c.Update(context.Background(), step))
	c = e.waitCondition(b, v1alpha1.ConditionTemplateResolved, metav1.ConditionFalse, v1alpha1.ReasonMissingParameter)
	assert.Contains(t, c.Message, `step "build" requires parameter(s) BUILDER_POOL`)

	e.updateSpec(b, func(b *v1alpha1.AgentBuild) {
		b.Spec.Pipeline.Parameters = []v1alpha1.Parameter{{Name: "BUILDER_POOL", Value: "large"}}
	})
	e.waitRun(ns, "custom-2")
	e.waitCondition(b, v1alpha1.ConditionTemplateResolved, metav1.ConditionTrue, v1alpha1.ReasonResolved)
}

// testTemplateChange: templates come from a watch, and a change reaches the next generation. A
// team's own pipeline-template-dev overrides the default from its creation on; an edit of it is
// used by the generation built after the controller has seen the edit; existing generations keep
// their Pipelines.
func (e *env) testTemplateChange(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace("template-change")
	b := e.createBuild(ns, "weather-agent", nil)
	e.waitRun(ns, "weather-agent-1")
	assert.Equal(t, "registry.kagenti-system.svc.cluster.local:5000/kagenti/weather-agent:latest", e.pipelineParam(ns, "weather-agent-1", "build", "IMAGE"))

	override := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pipeline-template-dev", Labels: map[string]string{templates.Label: templates.LabelValue}},
		Data:       map[string]string{templates.TemplateKey: devTemplate("registry.team-a.example:5000")},
	}
	require.NoError(t, e.c.Create(ctx, override))
	e.waitTemplateCache(override)
	e.touchSpec(b, "v2")
	e.waitRun(ns, "weather-agent-2")
	assert.Equal(t, "registry.team-a.example:5000/kagenti/weather-agent:v2", e.pipelineParam(ns, "weather-agent-2", "build", "IMAGE"))

	override.Data[templates.TemplateKey] = devTemplate("registry.team-b.example:5000")
	require.NoError(t, e.c.Update(ctx, override))
	e.waitTemplateCache(override)
	e.touchSpec(b, "v3")
	e.waitRun(ns, "weather-agent-3")
	assert.Equal(t, "registry.team-b.example:5000/kagenti/weather-agent:v3", e.pipelineParam(ns, "weather-agent-3", "build", "IMAGE"))
	assert.Equal(t, "registry.team-a.example:5000/kagenti/weather-agent:v2", e.pipelineParam(ns, "weather-agent-2", "build", "IMAGE"),
		"a template change never rewrites an existing generation")

	// Without the label the ConfigMap is no longer a template: the default applies again.
	override.Labels = nil
	require.NoError(t, e.c.Update(ctx, override))
	e.waitFor("the template cache to drop the unlabelled ConfigMap", func() (bool, string) {
		err := e.reconciler.Loader.Reader.Get(ctx, client.ObjectKeyFromObject(override), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	e.touchSpec(b, "v4")
	e.waitRun(ns, "weather-agent-4")
	assert.Equal(t, "registry.kagenti-system.svc.cluster.local:5000/kagenti/weather-agent:v4", e.pipelineParam(ns, "weather-agent-4", "build", "IMAGE"))
}

// devTemplate is the shipped dev template with another registry.
func devTemplate(registry string) string {
	return `parameters: [{name: REGISTRY, value: "` + registry + `"}, {name: TLS_VERIFY, value: "false"}]
requiredParameters: [SOURCE_REPO_URL, IMAGE]
steps: [{name: clone, configMap: step-git-clone}, {name: build, configMap: step-buildah-build}]
`
}

// waitTemplateCache waits until the controller's template cache holds cm as written: the
// controller reads templates from its watch, so a change is used once the watch delivered it.
func (e *env) waitTemplateCache(cm *corev1.ConfigMap) {
	e.waitFor("the template cache to see "+cm.Name, func() (bool, string) {
		got := &corev1.ConfigMap{}
		if err := e.reconciler.Loader.Reader.Get(context.Background(), client.ObjectKeyFromObject(cm), got); err != nil {
			return false, err.Error()
		}
		return got.ResourceVersion == cm.ResourceVersion, "resourceVersion " + got.ResourceVersion
	})
}

// touchSpec starts a new generation by changing the tag.
func (e *env) touchSpec(b *v1alpha1.AgentBuild, tag string) {
	e.updateSpec(b, func(b *v1alpha1.AgentBuild) { b.Spec.BuildOutput.Tag = tag })
}

func (e *env) pipelineParam(ns, pipeline, task, name string) string {
	p := &pipelinev1.Pipeline{}
	require.NoError(e.t, e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: pipeline}, p))
	return paramValue(p, task, name)
}

func (e *env) testCleanup(t *testing.T) {
	ns := e.namespace("cleanup")
	b := e.createBuild(ns, "weather-agent", nil)
	run := e.waitRun(ns, "weather-agent-1")
	// Tekton's PVC for the volumeClaimTemplate workspace is owned by the run.
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pvc-0123456789",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "tekton.dev/v1", Kind: "PipelineRun", Name: run.Name, UID: run.UID}}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	require.NoError(t, e.c.Create(context.Background(), pvc))
	other := pvc.DeepCopy()
	other.Name, other.OwnerReferences, other.ResourceVersion = "unrelated", nil, ""
	require.NoError(t, e.c.Create(context.Background(), other))

	e.setSucceeded(run, devImg+":latest", digestA)
	e.waitPhase(b, v1alpha1.PhaseSucceeded)
	e.waitFor("workspace PVC deleted", func() (bool, string) {
		got := &corev1.PersistentVolumeClaim{}
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(pvc), got)
		// Without kube-controller-manager the pvc-protection finalizer keeps it terminating.
		return apierrors.IsNotFound(err) || (err == nil && got.DeletionTimestamp != nil), fmt.Sprint(err)
	})
	got := &corev1.PersistentVolumeClaim{}
	require.NoError(t, e.c.Get(context.Background(), client.ObjectKeyFromObject(other), got))
	assert.Nil(t, got.DeletionTimestamp, "only the run's volumes are deleted")
}

// testVerdicts drives a build into every state the controller reports and checks what kstatus
// (Flux, kubectl-wait tooling) and the shipped Argo CD health script conclude from the object read
// back from the API server: InProgress right after create, while building and while a deployTo
// target is missing; Current when Ready; Failed for every terminal reason.
func (e *env) testVerdicts(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace("verdicts")

	// Right after create, before the controller has seen it: the CRD defaults status to
	// observedGeneration 0 (the create response is the object as stored).
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(newBuild(ns, "fresh", nil))
	require.NoError(t, err)
	fresh := &unstructured.Unstructured{Object: raw}
	fresh.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("AgentBuild"))
	delete(fresh.Object, "status")
	require.NoError(t, e.c.Create(ctx, fresh))
	observed, found, _ := unstructured.NestedInt64(fresh.Object, "status", "observedGeneration")
	assert.True(t, found, "status.observedGeneration defaulted: %v", fresh.Object["status"])
	assert.Equal(t, int64(0), observed)
	e.checkVerdict(fresh, kstatus.InProgressStatus, "Progressing", "right after create")

	deployTo := func(kind, apiVersion, container string) *v1alpha1.DeployTo {
		return &v1alpha1.DeployTo{TargetRef: duck.TargetRef{APIVersion: apiVersion, Kind: kind, Name: "weather-agent"}, Container: container}
	}
	tests := []struct {
		name    string
		drive   func(name string) *v1alpha1.AgentBuild // creates the build and brings it to the state
		reason  string                                 // Ready's reason in that state
		verdict kstatus.Status
		argo    string
	}{{
		name: "run waiting for Tekton to start it",
		drive: func(name string) *v1alpha1.AgentBuild {
			b := e.createBuild(ns, name, nil)
			e.waitRun(ns, name+"-1")
			return b
		},
		reason: v1alpha1.ReasonBuilding, verdict: kstatus.InProgressStatus, argo: "Progressing",
	}, {
		name: "building",
		drive: func(name string) *v1alpha1.AgentBuild {
			b := e.createBuild(ns, name, nil)
			e.setRunning(e.waitRun(ns, name+"-1"))
			e.waitPhase(b, v1alpha1.PhaseBuilding)
			return b
		},
		reason: v1alpha1.ReasonBuilding, verdict: kstatus.InProgressStatus, argo: "Progressing",
	}, {
		name: "succeeded",
		drive: func(name string) *v1alpha1.AgentBuild {
			b := e.createBuild(ns, name, nil)
			e.setSucceeded(e.waitRun(ns, name+"-1"), devImg+":latest", digestA)
			return b
		},
		reason: v1alpha1.ReasonBuildSucceeded, verdict: kstatus.CurrentStatus, argo: "Healthy",
	}, {
		name: "deployTo target not created yet",
		drive: func(name string) *v1alpha1.AgentBuild {
			b := e.createBuild(ns, name, deployTo("Deployment", "", "agent"))
			e.setSucceeded(e.waitRun(ns, name+"-1"), devImg+":latest", digestA)
			return b
		},
		reason: duck.ReasonTargetNotFound, verdict: kstatus.InProgressStatus, argo: "Progressing",
	}, {
		name: "build failed",
		drive: func(name string) *v1alpha1.AgentBuild {
			b := e.createBuild(ns, name, nil)
			e.setStatus(e.waitRun(ns, name+"-1"), corev1.ConditionFalse, "Failed", "Tasks Completed: 2 (Failed: 1, Cancelled 0), Skipped: 0", nil)
			return b
		},
		reason: v1alpha1.ReasonBuildFailed, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name: "succeeded without an image digest",
		drive: func(name string) *v1alpha1.AgentBuild {
			b := e.createBuild(ns, name, nil)
			e.setStatus(e.waitRun(ns, name+"-1"), corev1.ConditionTrue, "Succeeded", "", []pipelinev1.PipelineRunResult{
				{Name: "IMAGE_URL", Value: *pipelinev1.NewStructuredValues(devImg + ":latest")}})
			return b
		},
		reason: v1alpha1.ReasonMissingImageResult, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name: "PipelineRun name taken by another owner",
		drive: func(name string) *v1alpha1.AgentBuild {
			taken := &pipelinev1.PipelineRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-1"},
				Spec: pipelinev1.PipelineRunSpec{PipelineRef: &pipelinev1.PipelineRef{Name: "someone-elses"}}}
			require.NoError(t, e.c.Create(ctx, taken))
			return e.createBuild(ns, name, nil)
		},
		reason: v1alpha1.ReasonNameConflict, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name: "template not resolved",
		drive: func(name string) *v1alpha1.AgentBuild {
			b := newBuild(ns, name, nil)
			b.Spec.Pipeline = &v1alpha1.PipelineSpec{Steps: []v1alpha1.PipelineStep{{Name: "build", ConfigMap: "no-such-step"}}}
			require.NoError(t, e.c.Create(ctx, b))
			return b
		},
		reason: v1alpha1.ReasonTemplateNotResolved, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name: "deployTo container not found",
		drive: func(name string) *v1alpha1.AgentBuild {
			if err := e.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "weather-agent"}, &appsv1.Deployment{}); apierrors.IsNotFound(err) {
				e.createDeployment(ns, "weather-agent")
			}
			b := e.createBuild(ns, name, deployTo("Deployment", "", "missing"))
			e.setSucceeded(e.waitRun(ns, name+"-1"), devImg+":latest", digestA)
			return b
		},
		reason: v1alpha1.ReasonContainerNotFound, verdict: kstatus.FailedStatus, argo: "Degraded",
	}, {
		name: "deployTo kind not served",
		drive: func(name string) *v1alpha1.AgentBuild {
			b := e.createBuild(ns, name, deployTo("Widget", "example.com/v1", "agent"))
			e.setSucceeded(e.waitRun(ns, name+"-1"), devImg+":latest", digestA)
			return b
		},
		reason: duck.ReasonUnsupportedKind, verdict: kstatus.FailedStatus, argo: "Degraded",
	}}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.drive(fmt.Sprintf("state-%d", i))
			ready := e.waitCondition(b, v1alpha1.ConditionReady, readyStatus(tt.verdict), tt.reason)
			got := e.build(b)
			assert.Equal(t, got.Generation, got.Status.ObservedGeneration)
			reconciling, stalled := got.Status.Condition(duck.ConditionReconciling), got.Status.Condition(duck.ConditionStalled)
			switch tt.verdict {
			case kstatus.InProgressStatus:
				require.NotNil(t, reconciling, "Reconciling")
				assert.Equal(t, tt.reason, reconciling.Reason)
				assert.Nil(t, stalled)
			case kstatus.FailedStatus:
				require.NotNil(t, stalled, "Stalled")
				assert.Equal(t, tt.reason, stalled.Reason)
				assert.Equal(t, ready.Message, stalled.Message)
				assert.Nil(t, reconciling)
			default:
				assert.Nil(t, reconciling)
				assert.Nil(t, stalled)
			}
			e.assertVerdict(b, tt.verdict, tt.argo, tt.name)
		})
	}

	// A spec change the controller has not observed yet reads as in progress again, even on a
	// build that was Ready (the update response is the object as stored).
	b := e.build(&v1alpha1.AgentBuild{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "state-2"}})
	require.True(t, b.Status.IsReady())
	b.Spec.BuildOutput.Tag = "v2"
	u := &unstructured.Unstructured{}
	raw, err = runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	require.NoError(t, err)
	u.Object = raw
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("AgentBuild"))
	require.NoError(t, e.c.Update(ctx, u))
	e.checkVerdict(u, kstatus.InProgressStatus, "Progressing", "new generation")
}

func readyStatus(s kstatus.Status) metav1.ConditionStatus {
	if s == kstatus.CurrentStatus {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// assertVerdict reads the build back as GitOps tools do (unstructured) and checks their verdicts.
func (e *env) assertVerdict(b *v1alpha1.AgentBuild, want kstatus.Status, argo, state string) {
	e.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("AgentBuild"))
	require.NoError(e.t, e.c.Get(context.Background(), client.ObjectKeyFromObject(b), u))
	e.checkVerdict(u, want, argo, state)
}

func (e *env) checkVerdict(u *unstructured.Unstructured, want kstatus.Status, argo, state string) {
	e.t.Helper()
	ducktest.AssertVerdict(e.t, u, want, argo, state)
}

// --- helpers ---

// installTekton installs Tekton's CRDs once.
func (e *env) installTekton() {
	if e.tektonInstalled {
		return
	}
	_, err := envtest.InstallCRDs(e.cfg, envtest.CRDInstallOptions{Paths: []string{testsupport.TektonCRDDir(e.t)}, ErrorIfPathMissing: true})
	require.NoError(e.t, err)
	e.tektonInstalled = true
}

func controllerScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, v1alpha1.AddToScheme(s))
	require.NoError(t, tekton.AddToScheme(s))
	return s
}

func newBuild(ns, name string, to *v1alpha1.DeployTo) *v1alpha1.AgentBuild {
	return &v1alpha1.AgentBuild{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.AgentBuildSpec{
			Source:      v1alpha1.Source{Repository: "https://github.com/kagenti/agent-examples", Subfolder: "a2a/weather_service"},
			BuildOutput: v1alpha1.BuildOutput{Image: "kagenti/weather-agent"},
			DeployTo:    to,
		},
	}
}

func (e *env) createBuild(ns, name string, to *v1alpha1.DeployTo) *v1alpha1.AgentBuild {
	b := newBuild(ns, name, to)
	require.NoError(e.t, e.c.Create(context.Background(), b))
	return b
}

func (e *env) build(b *v1alpha1.AgentBuild) *v1alpha1.AgentBuild {
	got := &v1alpha1.AgentBuild{}
	require.NoError(e.t, e.c.Get(context.Background(), client.ObjectKeyFromObject(b), got))
	return got
}

func (e *env) updateSpec(b *v1alpha1.AgentBuild, mutate func(*v1alpha1.AgentBuild)) {
	require.NoError(e.t, retryConflict(func() error {
		got := e.build(b)
		mutate(got)
		return e.c.Update(context.Background(), got)
	}))
}

func (e *env) touch(b *v1alpha1.AgentBuild) {
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"test/touched":"`+time.Now().String()+`"}}}`))
	require.NoError(e.t, e.c.Patch(context.Background(), e.build(b), patch))
}

func retryConflict(f func() error) error {
	var err error
	for range 10 {
		if err = f(); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

func (e *env) namespace(name string) string {
	require.NoError(e.t, e.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	return name
}

func (e *env) createDeployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "agent", Image: "example.com/weather-agent:old", Env: []corev1.EnvVar{{Name: "PORT", Value: "8000"}}},
					{Name: "sidecar", Image: "example.com/sidecar:1.0"},
				}},
			},
		},
	}
	require.NoError(e.t, e.c.Create(context.Background(), d))
	return d
}

func (e *env) waitRun(ns, name string) *pipelinev1.PipelineRun {
	run := &pipelinev1.PipelineRun{}
	e.waitFor("PipelineRun "+ns+"/"+name, func() (bool, string) {
		err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, run)
		return err == nil, fmt.Sprint(err)
	})
	return run
}

func (e *env) runs(ns string, b *v1alpha1.AgentBuild) []pipelinev1.PipelineRun {
	list := &pipelinev1.PipelineRunList{}
	require.NoError(e.t, e.c.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{resources.LabelBuildUID: string(b.UID)}))
	return list.Items
}

func (e *env) setRunning(run *pipelinev1.PipelineRun) {
	e.setStatus(run, corev1.ConditionUnknown, "Running", "Tasks Completed: 0 (Failed: 0, Cancelled 0), Skipped: 0", nil)
}

func (e *env) setSucceeded(run *pipelinev1.PipelineRun, url, digest string) {
	e.setStatus(run, corev1.ConditionTrue, "Succeeded", "Tasks Completed: 2 (Failed: 0, Cancelled 0), Skipped: 0", []pipelinev1.PipelineRunResult{
		{Name: "IMAGE_URL", Value: *pipelinev1.NewStructuredValues(url)},
		{Name: "IMAGE_DIGEST", Value: *pipelinev1.NewStructuredValues(digest)},
	})
}

// setStatus plays Tekton: it writes the run's Succeeded condition, times and results.
func (e *env) setStatus(run *pipelinev1.PipelineRun, st corev1.ConditionStatus, reason, msg string, results []pipelinev1.PipelineRunResult) {
	require.NoError(e.t, retryConflict(func() error {
		got := &pipelinev1.PipelineRun{}
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(run), got); err != nil {
			return err
		}
		now := metav1.Now()
		if got.Status.StartTime == nil {
			got.Status.StartTime = &now
		}
		if st != corev1.ConditionUnknown {
			got.Status.CompletionTime = &now
		}
		got.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: st, Reason: reason, Message: msg})
		got.Status.Results = results
		return e.c.Status().Update(context.Background(), got)
	}))
}

func (e *env) waitPhase(b *v1alpha1.AgentBuild, phase v1alpha1.BuildPhase) {
	e.waitFor("phase "+string(phase), func() (bool, string) {
		got := e.build(b)
		return got.Status.Phase == phase, string(got.Status.Phase) + ": " + got.Status.Message
	})
}

func (e *env) waitCondition(b *v1alpha1.AgentBuild, t string, st metav1.ConditionStatus, reason string) *metav1.Condition {
	var found *metav1.Condition
	e.waitFor(fmt.Sprintf("%s=%s reason %s", t, st, reason), func() (bool, string) {
		found = meta.FindStatusCondition(e.build(b).Status.Conditions, t)
		if found == nil {
			return false, "absent"
		}
		return found.Status == st && found.Reason == reason, fmt.Sprintf("%s %s: %s", found.Status, found.Reason, found.Message)
	})
	return found
}

// eventReasons lists the reasons of the Events in ns, sorted.
func (e *env) eventReasons(ns string) []string {
	list := &corev1.EventList{}
	require.NoError(e.t, e.c.List(context.Background(), list, client.InNamespace(ns)))
	var out []string
	for _, ev := range list.Items {
		out = append(out, ev.Reason)
	}
	sort.Strings(out)
	return out
}

func (e *env) hasEvent(ns, reason string) bool {
	var ok bool
	e.waitFor("event "+reason, func() (bool, string) {
		list := &corev1.EventList{}
		require.NoError(e.t, e.c.List(context.Background(), list, client.InNamespace(ns)))
		for _, ev := range list.Items {
			if ev.Reason == reason {
				ok = true
			}
		}
		return ok, fmt.Sprintf("%d events", len(list.Items))
	})
	return ok
}

func (e *env) waitFor(what string, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("timed out waiting for %s; last: %s", what, last)
}

// consistently checks cond over a few reconcile opportunities.
func (e *env) consistently(cond func() bool) {
	e.t.Helper()
	for range 10 {
		require.True(e.t, cond())
		time.Sleep(100 * time.Millisecond)
	}
}

func paramValue(p *pipelinev1.Pipeline, task, name string) string {
	for _, t := range p.Spec.Tasks {
		if t.Name != task {
			continue
		}
		for _, prm := range t.Params {
			if prm.Name == name {
				return prm.Value.StringVal
			}
		}
	}
	return ""
}

// staleBuildClient is the manager's client whose cache has not yet seen the latest write of one
// AgentBuild: Get of that build returns the older copy.
type staleBuildClient struct {
	client.Client
	stale *v1alpha1.AgentBuild
}

func (c staleBuildClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if b, ok := obj.(*v1alpha1.AgentBuild); ok && key == client.ObjectKeyFromObject(c.stale) {
		c.stale.DeepCopyInto(b)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// testStaleCacheWritesNothing: a reconcile that reads the build from a cache still behind the
// controller's own status write (two wake-ups within milliseconds; in the load test, before runs'
// metadata-only updates were filtered, the run's status change and the workspace-cleaned
// annotation) writes nothing and records
// no Event: without the resourceVersion precondition it re-applied Ready with a new
// lastTransitionTime and repeated the BuildSucceeded Event, an Event-series PATCH after the build
// had converged.
func (e *env) testStaleCacheWritesNothing(t *testing.T) {
	ns := e.namespace("stale")
	b := e.createBuild(ns, "weather-agent", nil)
	run := e.waitRun(ns, "weather-agent-1")
	e.setRunning(run)
	e.waitPhase(b, v1alpha1.PhaseBuilding)
	stale := e.build(b)
	e.setSucceeded(run, devImg+":latest", digestA)
	e.waitCondition(b, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonBuildSucceeded)
	// The manager's own reconciles of the run's status change have settled.
	var settled *v1alpha1.AgentBuild
	e.waitFor("the status to stop changing", func() (bool, string) {
		before := e.build(b)
		time.Sleep(500 * time.Millisecond)
		settled = e.build(b)
		return before.ResourceVersion == settled.ResourceVersion, "resourceVersion " + settled.ResourceVersion
	})

	time.Sleep(time.Second) // condition times have a resolution of seconds: a rewrite must show
	r := newReconciler(e.mgr, e.opts, e.reconciler.Loader.Reader)
	r.Client = staleBuildClient{Client: r.Client, stale: stale}
	r.Tekton.watching = true // the manager's reconciler already watches the runs that fill the cache
	result, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
	require.NoError(t, err)
	assert.Positive(t, result.RequeueAfter, "a reconcile on a stale copy looks again")
	got := e.build(b)
	assert.Equal(t, settled.ResourceVersion, got.ResourceVersion, "a reconcile on a stale copy wrote the build")
	assert.Equal(t, settled.Status.Condition(v1alpha1.ConditionReady).LastTransitionTime, got.Status.Condition(v1alpha1.ConditionReady).LastTransitionTime)
}
