package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/agenttrace/internal/resources"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
)

var ctx = context.Background()

func getCM(t testing.TB, ns, name string) (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cm)
	return &cm, err
}

func events(t testing.TB, ns, objName string) []corev1.Event {
	t.Helper()
	var list corev1.EventList
	require.NoError(t, k8s.List(ctx, &list, client.InNamespace(ns)))
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Name == objName {
			out = append(out, e)
		}
	}
	return out
}

func waitEvent(t testing.TB, ns, objName, eventType, reason string) corev1.Event {
	t.Helper()
	var found corev1.Event
	eventually(t, "event "+reason, func() string {
		for _, e := range events(t, ns, objName) {
			if e.Type == eventType && e.Reason == reason {
				found = e
				return ""
			}
		}
		return "no " + eventType + " event " + reason
	})
	return found
}

// The seed example, end to end: ConfigMap with every file, owner reference, Active, and the
// deprecated jaeger exporter reported as a warning while Ready stays True.
func TestSeedExampleBecomesActive(t *testing.T) {
	ns := newNamespace(t)
	deployment(t, ns, "weather-agent", true)
	at := agentTrace(ns, "weather-agent-trace", "weather-agent")
	at.Spec.Exporters = []v1alpha1.Exporter{
		{Type: "otlp", Endpoint: "otel-collector.observability:4317", Protocol: "grpc", Compression: "gzip"},
		{Type: "jaeger", Endpoint: "jaeger-collector.observability:14250"},
	}
	at.Spec.Sampling = &v1alpha1.Sampling{Type: "probabilistic", Rate: "0.1"}
	at.Spec.GenAI = &v1alpha1.GenAI{Enabled: true, CapturePrompts: true, CaptureCompletions: true, CaptureModelParameters: true}
	at.Spec.ResourceAttributes = map[string]v1alpha1.ResourceAttributeValue{"service.name": "weather-agent", "service.version": "2.1.0", "deployment.environment": "production"}
	at.Spec.Integration = &v1alpha1.Integration{
		MLflow:     &v1alpha1.MLflow{Enabled: true, TrackingURI: "http://mlflow.ml-platform:5000", ExperimentName: "weather-agent-prod"},
		Prometheus: &v1alpha1.Prometheus{Enabled: true, Port: 9090, Path: "/metrics"},
	}
	create(t, at)

	got := waitStatus(t, ns, at.Name, v1alpha1.PhaseActive, v1alpha1.ReasonDeprecatedExporter)
	assert.Equal(t, "weather-agent-trace", got.Status.ConfigMapName)
	for _, c := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionTargetResolved, v1alpha1.ConditionConfigMapReady} {
		assert.Equal(t, metav1.ConditionTrue, findCond(got, c).Status, c)
	}
	assert.Contains(t, findCond(got, v1alpha1.ConditionReady).Message, "otlp exporter")
	ev := waitEvent(t, ns, at.Name, corev1.EventTypeWarning, v1alpha1.ReasonDeprecatedExporter)
	assert.Contains(t, ev.Message, "OTLP port")

	cm, err := getCM(t, ns, "weather-agent-trace")
	require.NoError(t, err)
	owner := metav1.GetControllerOf(cm)
	require.NotNil(t, owner, "ConfigMap must be controlled by the AgentTrace (garbage collection)")
	assert.Equal(t, got.UID, owner.UID)
	assert.Equal(t, "AgentTrace", owner.Kind)
	assert.Equal(t, Name, cm.Labels[contract.ManagedByLabel])
	assert.NotEmpty(t, cm.Annotations[contract.ContentHashAnnotation])
	assert.Equal(t, "otel-collector.observability:4317", cm.Data["otel_endpoint"])
	assert.Contains(t, cm.Data["otel.env"], "OTEL_TRACES_SAMPLER=traceidratio\nOTEL_TRACES_SAMPLER_ARG=0.1\n")
	assert.NotContains(t, cm.Data["otel.env"], "14250", "jaeger never reaches the SDK environment")
	assert.NotContains(t, cm.Data["otel-config.yaml"], "14250")
	assert.Contains(t, cm.Data["config.json"], "jaeger-collector.observability:14250")

	// The API server kept every field of the seed (no pruning).
	assert.Equal(t, v1alpha1.Rate("0.1"), got.Spec.Sampling.Rate)
	assert.Equal(t, "weather-agent-prod", got.Spec.Integration.MLflow.ExperimentName)
}

// A zipkin exporter is deprecated like jaeger: it stays in the environment form (SDKs that still
// ship one read OTEL_TRACES_EXPORTER=zipkin), is left out of otel-config.yaml (file_format 1.0 has
// no zipkin exporter; otelconf refuses the whole file for it), and Ready says so.
func TestZipkinExporterIsDeprecated(t *testing.T) {
	ns := newNamespace(t)
	deployment(t, ns, "agent", true)
	at := agentTrace(ns, "zipkin", "agent")
	at.Spec.Exporters = []v1alpha1.Exporter{
		{Type: "otlp", Endpoint: "otel-collector.observability:4317"},
		{Type: "zipkin", Endpoint: "zipkin.observability:9411", Insecure: true},
		{Type: "jaeger", Endpoint: "jaeger-collector.observability:14250"},
	}
	create(t, at)

	got := waitStatus(t, ns, at.Name, v1alpha1.PhaseActive, v1alpha1.ReasonDeprecatedExporter)
	ready := findCond(got, v1alpha1.ConditionReady)
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.Contains(t, ready.Message, "the zipkin exporter is deprecated")
	assert.Contains(t, ready.Message, "the jaeger exporter is deprecated")
	ev := waitEvent(t, ns, at.Name, corev1.EventTypeWarning, v1alpha1.ReasonDeprecatedExporter)
	assert.Contains(t, ev.Message, "the zipkin exporter is deprecated", "one Event names every deprecated exporter")
	assert.Contains(t, ev.Message, "the jaeger exporter is deprecated")

	cm, err := getCM(t, ns, "agent-trace")
	require.NoError(t, err)
	assert.Contains(t, cm.Data["otel.env"], "OTEL_TRACES_EXPORTER=otlp,zipkin\n")
	assert.Contains(t, cm.Data["otel.env"], "OTEL_EXPORTER_ZIPKIN_ENDPOINT=http://zipkin.observability:9411/api/v2/spans\n")
	assert.Equal(t, "http://zipkin.observability:9411/api/v2/spans", cm.Data["zipkin_endpoint"])
	assert.NotContains(t, cm.Data["otel-config.yaml"], "zipkin")
	assert.Contains(t, cm.Data["otel-config.yaml"], "otlp_grpc")
}

// A missing target is Pending/TargetNotFound, and recovers by itself when the workload appears.
func TestTargetNotFoundRecovers(t *testing.T) {
	ns := newNamespace(t)
	create(t, agentTrace(ns, "early", "later"))
	got := waitStatus(t, ns, "early", v1alpha1.PhasePending, duck.ReasonTargetNotFound)
	assert.Equal(t, metav1.ConditionFalse, findCond(got, v1alpha1.ConditionTargetResolved).Status)
	assert.Equal(t, metav1.ConditionFalse, findCond(got, v1alpha1.ConditionReady).Status)
	waitEvent(t, ns, "early", corev1.EventTypeWarning, duck.ReasonTargetNotFound)
	_, err := getCM(t, ns, "later-trace")
	assert.True(t, apierrors.IsNotFound(err), "nothing is written for a missing target")

	deployment(t, ns, "later", true)
	got = waitStatus(t, ns, "early", v1alpha1.PhaseActive, v1alpha1.ReasonActive)
	assert.Equal(t, metav1.ConditionTrue, findCond(got, v1alpha1.ConditionTargetResolved).Status)
	_, err = getCM(t, ns, "later-trace")
	assert.NoError(t, err)
}

func TestUnsupportedKind(t *testing.T) {
	ns := newNamespace(t)
	noTemplate := agentTrace(ns, "no-template", "settings")
	noTemplate.Spec.TargetRef = duck.TargetRef{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}
	require.NoError(t, k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}))
	create(t, noTemplate)
	unknown := agentTrace(ns, "unknown-kind", "x")
	unknown.Spec.TargetRef = duck.TargetRef{APIVersion: "example.com/v1", Kind: "Agent", Name: "x"}
	create(t, unknown)

	got := waitStatus(t, ns, "no-template", v1alpha1.PhaseError, duck.ReasonUnsupportedKind)
	assert.Contains(t, findCond(got, v1alpha1.ConditionTargetResolved).Message, "no pod template")
	got = waitStatus(t, ns, "unknown-kind", v1alpha1.PhaseError, duck.ReasonUnsupportedKind)
	assert.Contains(t, findCond(got, v1alpha1.ConditionTargetResolved).Message, "not served")
}

// The oldest AgentTrace of a target wins; the other reports Conflict, writes nothing, and takes
// over once the winner is gone.
func TestConflictAndHandover(t *testing.T) {
	ns := newNamespace(t)
	deployment(t, ns, "shared", true)
	first := agentTrace(ns, "first", "shared")
	create(t, first)
	waitStatus(t, ns, "first", v1alpha1.PhaseActive, v1alpha1.ReasonActive)
	second := agentTrace(ns, "second", "shared")
	second.Spec.Exporters[0].Endpoint = "second-collector:4317"
	create(t, second)

	got := waitStatus(t, ns, "second", v1alpha1.PhaseError, v1alpha1.ReasonConflict)
	assert.Contains(t, findCond(got, v1alpha1.ConditionReady).Message, `AgentTrace "first" already configures Deployment "shared"`)
	assert.Equal(t, v1alpha1.ReasonConflict, findCond(got, v1alpha1.ConditionConfigMapReady).Reason)
	assert.Empty(t, got.Status.ConfigMapName)
	waitEvent(t, ns, "second", corev1.EventTypeWarning, v1alpha1.ReasonConflict)
	cm, err := getCM(t, ns, "shared-trace")
	require.NoError(t, err)
	assert.Equal(t, "otel-collector.observability:4317", cm.Data["otel_endpoint"], "the loser wrote nothing")
	waitStatus(t, ns, "first", v1alpha1.PhaseActive, v1alpha1.ReasonActive) // the winner is unaffected

	// Delete the winner; envtest has no garbage collector, so the test plays it until the second
	// AgentTrace takes over: a reconcile of "first" that read it from the cache before its deletion
	// arrived (the ConfigMap's deletion enqueues it) may write the ConfigMap once more, and the
	// collector deletes that one too (its owner no longer exists).
	require.NoError(t, k8s.Delete(ctx, first))
	eventually(t, "second takes over once the collector removed first's ConfigMap", func() string {
		if cm, err := getCM(t, ns, "shared-trace"); err == nil {
			if owner := metav1.GetControllerOf(cm); owner != nil && owner.Name == "first" {
				_ = k8s.Delete(ctx, cm)
				return "deleted a ConfigMap controlled by first"
			}
		}
		got := getAT(t, ns, "second")
		if ready := findCond(got, v1alpha1.ConditionReady); got.Status.Phase != v1alpha1.PhaseActive || ready == nil || ready.Reason != v1alpha1.ReasonActive {
			return fmt.Sprintf("second: phase %s, Ready %+v", got.Status.Phase, ready)
		}
		return ""
	})
	waitStatus(t, ns, "second", v1alpha1.PhaseActive, v1alpha1.ReasonActive)
	eventually(t, "second's ConfigMap", func() string {
		cm, err := getCM(t, ns, "shared-trace")
		if err != nil || cm.Data["otel_endpoint"] != "second-collector:4317" {
			return fmt.Sprintf("%v %v", err, cm.Data["otel_endpoint"])
		}
		return ""
	})
}

// Changing the spec updates the ConfigMap only: the workload's generation and pod template do not
// change, so no pod restarts. Conditions keep their lastTransitionTime.
func TestSpecChangeUpdatesConfigMapWithoutRestart(t *testing.T) {
	ns := newNamespace(t)
	deployment(t, ns, "agent", true)
	create(t, agentTrace(ns, "trace", "agent"))
	before := waitStatus(t, ns, "trace", v1alpha1.PhaseActive, v1alpha1.ReasonActive)
	var dep appsv1.Deployment
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "agent"}, &dep))
	cm, err := getCM(t, ns, "agent-trace")
	require.NoError(t, err)
	assert.Equal(t, "parentbased_always_on", cm.Data["sampler"])

	at := getAT(t, ns, "trace")
	require.NoError(t, updateRetrying(ctx, at, func() {
		at.Spec.Sampling = &v1alpha1.Sampling{Type: "parent_based_probabilistic", Rate: "0.5"}
	}))
	after := waitStatus(t, ns, "trace", v1alpha1.PhaseActive, v1alpha1.ReasonActive)
	cm, err = getCM(t, ns, "agent-trace")
	require.NoError(t, err)
	assert.Equal(t, "parentbased_traceidratio", cm.Data["sampler"])
	assert.Equal(t, "0.5", cm.Data["sampler_arg"])

	var depAfter appsv1.Deployment
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "agent"}, &depAfter))
	assert.Equal(t, dep.Generation, depAfter.Generation, "the workload must not be touched")
	assert.True(t, equality.Semantic.DeepEqual(dep.Spec.Template, depAfter.Spec.Template), "pod template unchanged: no restart")
	for _, c := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionTargetResolved, v1alpha1.ConditionConfigMapReady} {
		assert.Equal(t, findCond(before, c).LastTransitionTime, findCond(after, c).LastTransitionTime, c)
	}
	assert.Greater(t, after.Status.ObservedGeneration, before.Status.ObservedGeneration)
}

// configuredPods counts running pods of the target that mount the trace ConfigMap, and follows
// pod status changes.
func TestConfiguredPods(t *testing.T) {
	ns := newNamespace(t)
	deployment(t, ns, "web", true)
	create(t, agentTrace(ns, "trace", "web"))
	waitStatus(t, ns, "trace", v1alpha1.PhaseActive, v1alpha1.ReasonActive)

	mkPod := func(name string, mounted bool, phase corev1.PodPhase, labels map[string]string) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:v1"}}},
		}
		if mounted {
			p.Spec.Volumes = []corev1.Volume{{Name: contract.VolumeTrace, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "web-trace"}, Optional: ptr(true)}}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: contract.VolumeTrace, MountPath: "/etc/kagenti/trace", ReadOnly: true}}
		}
		create(t, p)
		p.Status.Phase = phase
		require.NoError(t, k8s.Status().Update(ctx, p))
	}
	web := map[string]string{"app": "web"}
	mkPod("running-1", true, corev1.PodRunning, web)
	mkPod("running-2", true, corev1.PodRunning, web)
	mkPod("pending", true, corev1.PodPending, web)
	mkPod("not-mounted", false, corev1.PodRunning, web)
	mkPod("other-app", true, corev1.PodRunning, map[string]string{"app": "other"})

	eventually(t, "configuredPods=2", func() string {
		at := getAT(t, ns, "trace")
		if at.Status.ConfiguredPods != 2 {
			return fmt.Sprintf("configuredPods=%d", at.Status.ConfiguredPods)
		}
		return ""
	})
	var p corev1.Pod
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pending"}, &p))
	p.Status.Phase = corev1.PodRunning
	require.NoError(t, k8s.Status().Update(ctx, &p))
	eventually(t, "configuredPods=3", func() string {
		if n := getAT(t, ns, "trace").Status.ConfiguredPods; n != 3 {
			return fmt.Sprintf("configuredPods=%d", n)
		}
		return ""
	})
}

func ptr[T any](v T) *T { return &v }

func keyOf(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

// A workload the injector has not processed still gets its ConfigMap (it is mounted as soon as
// the workload is injected), and the AgentTrace says why the agent does not see it yet.
func TestTargetNotInjected(t *testing.T) {
	ns := newNamespace(t)
	deployment(t, ns, "plain", false)
	create(t, agentTrace(ns, "trace", "plain"))
	got := waitStatus(t, ns, "trace", v1alpha1.PhaseActive, v1alpha1.ReasonTargetNotInjected)
	ready := findCond(got, v1alpha1.ConditionReady)
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.Contains(t, ready.Message, "kagenti.io/inject=enabled")
	waitEvent(t, ns, "trace", corev1.EventTypeWarning, v1alpha1.ReasonTargetNotInjected)
	_, err := getCM(t, ns, "plain-trace")
	require.NoError(t, err)

	// Injection (here: the annotation the injector writes) clears the warning.
	var dep appsv1.Deployment
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "plain"}, &dep))
	dep.Spec.Template.Annotations = map[string]string{contract.InjectionStatusAnnotation: "{}"}
	require.NoError(t, k8s.Update(ctx, &dep))
	waitStatus(t, ns, "trace", v1alpha1.PhaseActive, v1alpha1.ReasonActive)
}

// The controller restores its ConfigMap when it is deleted or edited.
func TestConfigMapRestored(t *testing.T) {
	ns := newNamespace(t)
	deployment(t, ns, "agent", true)
	create(t, agentTrace(ns, "trace", "agent"))
	waitStatus(t, ns, "trace", v1alpha1.PhaseActive, v1alpha1.ReasonActive)
	cm, err := getCM(t, ns, "agent-trace")
	require.NoError(t, err)
	want := cm.Data[resources.KeyOTelEnv]

	require.NoError(t, updateRetrying(ctx, cm, func() { cm.Data[resources.KeyOTelEnv] = "OTEL_SDK_DISABLED=true\n" }))
	eventually(t, "edit reverted", func() string {
		cm, err := getCM(t, ns, "agent-trace")
		if err != nil || cm.Data[resources.KeyOTelEnv] != want {
			return fmt.Sprintf("%v %q", err, cm.Data[resources.KeyOTelEnv])
		}
		return ""
	})
	require.NoError(t, k8s.Delete(ctx, cm))
	eventually(t, "deleted ConfigMap recreated", func() string {
		if _, err := getCM(t, ns, "agent-trace"); err != nil {
			return err.Error()
		}
		return ""
	})
}

// A ConfigMap of the same name made by someone else is never taken over.
func TestConfigMapNotOwned(t *testing.T) {
	ns := newNamespace(t)
	deployment(t, ns, "agent", true)
	require.NoError(t, k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent-trace"},
		Data: map[string]string{"mine": "yes"}}))
	create(t, agentTrace(ns, "trace", "agent"))
	got := waitStatus(t, ns, "trace", v1alpha1.PhaseError, v1alpha1.ReasonConfigMapNotOwned)
	assert.Contains(t, findCond(got, v1alpha1.ConditionConfigMapReady).Message, `ConfigMap "agent-trace" exists and is not managed by this controller`)
	cm, err := getCM(t, ns, "agent-trace")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"mine": "yes"}, cm.Data)
}

// Bad specs are rejected by the API server itself, with the field path and a clear message.
func TestValidationRejections(t *testing.T) {
	ns := newNamespace(t)
	otlp := v1alpha1.Exporter{Type: "otlp", Endpoint: "collector:4317"}
	cases := []struct {
		name   string
		mutate func(*v1alpha1.AgentTrace)
		want   []string
	}{
		{"no exporters", func(a *v1alpha1.AgentTrace) { a.Spec.Exporters = nil }, []string{"spec.exporters"}},
		{"duplicate exporter types", func(a *v1alpha1.AgentTrace) { a.Spec.Exporters = []v1alpha1.Exporter{otlp, otlp} },
			[]string{"spec.exporters", "exporter types must be unique"}},
		{"endpoint not host:port or URL", func(a *v1alpha1.AgentTrace) { a.Spec.Exporters[0].Endpoint = "collector" },
			[]string{"spec.exporters[0].endpoint", "host:port"}},
		{"endpoint port out of range", func(a *v1alpha1.AgentTrace) { a.Spec.Exporters[0].Endpoint = "collector:70000" },
			[]string{"spec.exporters[0].endpoint", "1-65535"}},
		{"endpoint URL with other scheme", func(a *v1alpha1.AgentTrace) { a.Spec.Exporters[0].Endpoint = "ftp://collector:21" },
			[]string{"spec.exporters[0].endpoint"}},
		{"endpoint missing", func(a *v1alpha1.AgentTrace) { a.Spec.Exporters[0].Endpoint = "" },
			[]string{"spec.exporters[0].endpoint", "endpoint is required"}},
		{"protocol on zipkin", func(a *v1alpha1.AgentTrace) {
			a.Spec.Exporters = []v1alpha1.Exporter{{Type: "zipkin", Endpoint: "zipkin:9411", Protocol: "grpc"}}
		}, []string{"spec.exporters[0].protocol", "only to otlp"}},
		{"unknown exporter type", func(a *v1alpha1.AgentTrace) { a.Spec.Exporters[0].Type = "datadog" },
			[]string{"spec.exporters[0].type", "Unsupported value"}},
		{"probabilistic without rate", func(a *v1alpha1.AgentTrace) { a.Spec.Sampling = &v1alpha1.Sampling{Type: "probabilistic"} },
			[]string{"spec.sampling.rate", "rate is required for probabilistic sampling"}},
		{"rate above 1", func(a *v1alpha1.AgentTrace) {
			a.Spec.Sampling = &v1alpha1.Sampling{Type: "parent_based_probabilistic", Rate: "1.5"}
		}, []string{"spec.sampling.rate", "less than or equal to 1"}},
		{"rate below 0", func(a *v1alpha1.AgentTrace) {
			a.Spec.Sampling = &v1alpha1.Sampling{Type: "probabilistic", Rate: "-0.1"}
		},
			[]string{"spec.sampling.rate", "greater than or equal to 0"}},
		{"rate on always_on", func(a *v1alpha1.AgentTrace) { a.Spec.Sampling = &v1alpha1.Sampling{Type: "always_on", Rate: "0.5"} },
			[]string{"spec.sampling.rate", "applies only to probabilistic"}},
		{"prometheus port out of range", func(a *v1alpha1.AgentTrace) {
			a.Spec.Integration = &v1alpha1.Integration{Prometheus: &v1alpha1.Prometheus{Enabled: true, Port: 70000}}
		}, []string{"spec.integration.prometheus.port", "less than or equal to 65535"}},
		{"mlflow without trackingUri", func(a *v1alpha1.AgentTrace) {
			a.Spec.Integration = &v1alpha1.Integration{MLflow: &v1alpha1.MLflow{Enabled: true}}
		}, []string{"spec.integration.mlflow.trackingUri", "trackingUri is required"}},
		{"mlflow trackingUri not a URL", func(a *v1alpha1.AgentTrace) {
			a.Spec.Integration = &v1alpha1.Integration{MLflow: &v1alpha1.MLflow{Enabled: true, TrackingURI: "mlflow:5000"}}
		}, []string{"spec.integration.mlflow.trackingUri", "http(s) URL"}},
		{"genai capture without enabled", func(a *v1alpha1.AgentTrace) { a.Spec.GenAI = &v1alpha1.GenAI{CapturePrompts: true} },
			[]string{"spec.genai", "require enabled: true"}},
		{"bad resource attribute name", func(a *v1alpha1.AgentTrace) {
			a.Spec.ResourceAttributes = map[string]v1alpha1.ResourceAttributeValue{"bad key": "v"}
		},
			[]string{"spec.resourceAttributes", "resource attribute names"}},
		{"targetRef without name", func(a *v1alpha1.AgentTrace) { a.Spec.TargetRef.Name = "" },
			[]string{"spec.targetRef.name"}},
		// 800 KB used to be admitted and then fail every ConfigMap write (ApplyFailed forever).
		{"resource attribute of 800 KB", func(a *v1alpha1.AgentTrace) {
			a.Spec.ResourceAttributes = map[string]v1alpha1.ResourceAttributeValue{"big": v1alpha1.ResourceAttributeValue(strings.Repeat("x", 800<<10))}
		}, []string{"spec.resourceAttributes.big", "Too long: may not be more than 1024"}},
		{"resource attributes over 8192 characters in total", func(a *v1alpha1.AgentTrace) {
			a.Spec.ResourceAttributes = map[string]v1alpha1.ResourceAttributeValue{}
			for i := range 10 {
				a.Spec.ResourceAttributes[fmt.Sprintf("attr%d", i)] = v1alpha1.ResourceAttributeValue(strings.Repeat("x", 1000))
			}
		}, []string{"spec.resourceAttributes", "resource attribute names and values must total at most 8192 characters"}},
		{"more than 64 resource attributes", func(a *v1alpha1.AgentTrace) {
			a.Spec.ResourceAttributes = map[string]v1alpha1.ResourceAttributeValue{}
			for i := range 65 {
				a.Spec.ResourceAttributes[fmt.Sprintf("a%d", i)] = "v"
			}
		}, []string{"spec.resourceAttributes", "must have at most 64 items"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			at := agentTrace(ns, fmt.Sprintf("bad-%d", i), "agent")
			at.Spec.Exporters = []v1alpha1.Exporter{otlp}
			tc.mutate(at)
			err := k8s.Create(ctx, at)
			require.Error(t, err)
			require.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	// And the valid shapes are accepted: URL and IPv6 endpoints, console without endpoint.
	ok := agentTrace(ns, "good", "agent")
	ok.Spec.Exporters = []v1alpha1.Exporter{
		{Type: "otlp", Endpoint: "https://otel.example.com:4318", Protocol: "http/protobuf"},
		{Type: "zipkin", Endpoint: "[fd00::1]:9411"},
		{Type: "console"},
	}
	ok.Spec.Sampling = &v1alpha1.Sampling{Type: "probabilistic", Rate: "1"}
	ok.Spec.ResourceAttributes = map[string]v1alpha1.ResourceAttributeValue{} // at the bounds: 7 × (6 + 1024) ≤ 8192
	for i := range 7 {
		ok.Spec.ResourceAttributes[fmt.Sprintf("attr.%d", i)] = v1alpha1.ResourceAttributeValue(strings.Repeat("v", 1024))
	}
	require.NoError(t, k8s.Create(ctx, ok))
	got := getAT(t, ns, "good")
	assert.True(t, strings.HasPrefix(string(got.Spec.Sampling.Rate), "1"))
}

// updateRetrying applies mutate to the latest version of obj and updates it, retrying on conflicts:
// the controller writes the same objects (status, reverted edits) while a test changes them.
func updateRetrying(ctx context.Context, obj client.Object, mutate func()) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return k8s.Update(ctx, obj)
	})
}

// TestConfigMapEventsOnlyForNews: writing the ConfigMap the first time records no Event (the status
// says it is there); an update does, and so does re-creating one that someone deleted.
func TestConfigMapEventsOnlyForNews(t *testing.T) {
	ns := newNamespace(t)
	deployment(t, ns, "agent", true)
	create(t, agentTrace(ns, "trace", "agent"))
	waitStatus(t, ns, "trace", v1alpha1.PhaseActive, v1alpha1.ReasonActive)

	at := getAT(t, ns, "trace")
	require.NoError(t, updateRetrying(ctx, at, func() {
		at.Spec.Sampling = &v1alpha1.Sampling{Type: "parent_based_probabilistic", Rate: "0.5"}
	}))
	waitEvent(t, ns, "trace", corev1.EventTypeNormal, "ConfigMapUpdated")
	// The recorder sends Events in the order they were recorded: a creation Event would be here by now.
	for _, e := range events(t, ns, "trace") {
		assert.NotEqual(t, "ConfigMapCreated", e.Reason, "the first write is no Event")
	}

	cm, err := getCM(t, ns, "agent-trace")
	require.NoError(t, err)
	require.NoError(t, k8s.Delete(ctx, cm))
	waitEvent(t, ns, "trace", corev1.EventTypeNormal, "ConfigMapCreated")
	_, err = getCM(t, ns, "agent-trace")
	require.NoError(t, err, "re-created")
}
