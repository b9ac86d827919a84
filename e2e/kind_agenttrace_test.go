package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// receivedSpan is one span as hack/otlp-sink lists it.
type receivedSpan struct {
	Name         string            `json:"name"`
	TraceID      string            `json:"traceId"`
	SpanID       string            `json:"spanId"`
	ParentSpanID string            `json:"parentSpanId"`
	Resource     map[string]string `json:"resource"`
	Attributes   map[string]string `json:"attributes"`
}

// createOTLPSink runs hack/otlp-sink in ns behind Service otlp-sink (OTLP/HTTP on 4318).
func createOTLPSink(t *testing.T, c client.Client, ns string) {
	t.Helper()
	sinkLabels := map[string]string{"app": "otlp-sink"}
	framework.Create(t, c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "otlp-sink", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: sinkLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sinkLabels}, Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{
					Name: "sink", Image: framework.OTLPSinkImage(), SecurityContext: restrictedContainer(),
					Ports:          []corev1.ContainerPort{{Name: "otlp-http", ContainerPort: 4318}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(4318)}}, PeriodSeconds: 1},
				}},
			}},
		},
	})
	framework.Create(t, c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "otlp-sink", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: sinkLabels, Ports: []corev1.ServicePort{{Name: "otlp-http", Port: 4318, TargetPort: intstr.FromInt(4318)}}},
	})
}

// otlpSinkSpans returns a function listing what the otlp-sink of ns has received so far
// (through a port-forward), and the raw body it listed it from.
func otlpSinkSpans(t *testing.T, c client.Client, ns string) func() ([]receivedSpan, error) {
	t.Helper()
	sink := framework.PortForward(t, ns, podOf(t, c, ns, "otlp-sink"), 4318)
	return func() ([]receivedSpan, error) {
		resp, err := http.Get("http://" + sink + "/spans")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var got []receivedSpan
		return got, json.NewDecoder(resp.Body).Decode(&got)
	}
}

// TestKindAgentTraceReachesItsCollector: an AgentTrace configures a real agent's OpenTelemetry SDK
// on a real kubelet. The example agent (examples/agent-telemetry, its own image) reads the files of
// the ConfigMap {workload}-trace that the injector mounted at /etc/kagenti/trace, builds its tracer
// provider from them and exports spans over OTLP/HTTP to a receiver in the cluster (hack/otlp-sink),
// which the test reads. A change of the AgentTrace reaches the running agent through the kubelet's
// ConfigMap refresh: its spans carry the new resource attribute and GenAI capture, with no restart.
func TestKindAgentTraceReachesItsCollector(t *testing.T) {
	requireKind(t)
	c := framework.Client(t)
	framework.RequirePillar(t, c, "injector")
	framework.RequirePillar(t, c, "agenttrace")
	ns := framework.Namespace(t, c, "kind-trace", map[string]string{"kagenti.io/injection": "enabled"})

	createOTLPSink(t, c, ns)

	// The agent gets the trace mount only: every identity component is excluded.
	exclude := map[string]string{"kagenti.io/exclude-components": "proxy-init,spiffe-helper,client-registration,auth-proxy,envoy-proxy"}
	agentLabels := map[string]string{"app": "traced"}
	framework.Create(t, c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "traced", Namespace: ns, Labels: map[string]string{"kagenti.io/inject": "enabled"}, Annotations: exclude},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: agentLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: agentLabels, Annotations: exclude}, Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{
					Name: "agent", Image: framework.TelemetryAgentImage(), SecurityContext: restrictedContainer(),
					Args: []string{"-poll=2s", "-every=1s"},
				}},
			}},
		},
	})
	at := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"targetRef":          map[string]any{"kind": "Deployment", "name": "traced"},
		"exporters":          []any{map[string]any{"type": "otlp", "protocol": "http/protobuf", "endpoint": "http://otlp-sink." + ns + ".svc:4318"}},
		"sampling":           map[string]any{"type": "always_on"},
		"resourceAttributes": map[string]any{"deployment.environment.name": "kind"},
	}}}
	at.SetGroupVersionKind(agentTraceGVK)
	at.SetNamespace(ns)
	at.SetName("traced")
	framework.Create(t, c, at)

	agent := readyPodOf(t, c, ns, "traced")
	mounted := false
	for _, m := range agent.Spec.Containers[0].VolumeMounts {
		mounted = mounted || m.MountPath == "/etc/kagenti/trace"
	}
	if !mounted {
		t.Fatalf("the injector did not mount the trace ConfigMap into the agent: %+v", agent.Spec.Containers[0].VolumeMounts)
	}
	spans := otlpSinkSpans(t, c, ns)
	// waitSpan waits for a span of the agent that satisfies ok, and says what came instead.
	waitSpan := func(timeout time.Duration, what string, ok func(receivedSpan) bool) {
		t.Helper()
		framework.Eventually(t, timeout, what, func(context.Context) (bool, string, error) {
			got, err := spans()
			if err != nil {
				return false, err.Error(), nil
			}
			for _, s := range got {
				if ok(s) {
					return true, "", nil
				}
			}
			if len(got) == 0 {
				return false, "no spans received", nil
			}
			last := got[len(got)-1]
			return false, fmt.Sprintf("%d spans; the last: %s resource %v attributes %v", len(got), last.Name, last.Resource, last.Attributes), nil
		})
	}

	waitSpan(2*time.Minute, "the agent's execute_tool span at the receiver, with the AgentTrace's resource", func(s receivedSpan) bool {
		return s.Name == "execute_tool get_weather" && s.Resource["deployment.environment.name"] == "kind" &&
			s.Resource["service.name"] != "" && s.Attributes["gen_ai.input.messages"] == ""
	})

	t.Run("an AgentTrace change reaches the running agent without a restart", func(t *testing.T) {
		patch := []byte(`{"spec":{"resourceAttributes":{"deployment.environment.name":"kind-2"},"genai":{"enabled":true,"capturePrompts":true}}}`)
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(agentTraceGVK)
		obj.SetNamespace(ns)
		obj.SetName("traced")
		if err := c.Patch(context.Background(), obj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		// The kubelet refreshes a ConfigMap volume within its sync period plus its cache TTL (about a minute).
		waitSpan(3*time.Minute, "spans with the new resource attribute and the captured prompt", func(s receivedSpan) bool {
			return s.Resource["deployment.environment.name"] == "kind-2" && strings.Contains(s.Attributes["gen_ai.input.messages"], "Weather in Paris")
		})
		t.Logf("the change reached the agent's spans in %s", time.Since(start).Round(time.Second))
		assertNoRestarts(t, readyPodOf(t, c, ns, "traced"))
	})
}

// assertKindAuthbridgeSpans: after a call caller → callee (the identity flow), the otlp-sink of ns
// has, from the caller's authbridge, the outbound request's span and the token exchange's for the
// callee's audience (issued by the IdP once), and from the callee's authbridge the inbound request's
// span, allowed, with the caller's verified identity. In one call's trace the exchange and the
// callee's inbound span are children of the caller's outbound span (W3C trace context across the
// pods); no attribute holds the user's token.
//
// call makes one call caller → callee; it is made again while no span has come, because a pod that
// started before its AgentTrace's ConfigMap existed gets the trace files only with the kubelet's
// next sync of the volume (about a minute), and the authbridge starts exporting then.
func assertKindAuthbridgeSpans(t *testing.T, c client.Client, ns, callerID, calleeID, userToken string, call func()) {
	t.Helper()
	spans := otlpSinkSpans(t, c, ns)
	var outbound, exchange, inbound receivedSpan
	issued := false
	start, last := time.Now(), time.Time{}
	framework.Eventually(t, 3*time.Minute, "the authbridges' spans at the receiver", func(context.Context) (bool, string, error) {
		if time.Since(last) > 2*time.Second {
			call()
			last = time.Now()
		}
		got, err := spans()
		if err != nil {
			return false, err.Error(), nil
		}
		// One call's spans: its trace holds the caller's outbound span, the exchange (issued for the
		// first call, cached after) as its child, and the callee's inbound span as its child.
		var names []string
		issued = issued || slices.ContainsFunc(got, func(s receivedSpan) bool {
			return s.Name == "kagenti.authbridge.exchange" && s.Attributes["kagenti.exchange.audience"] == calleeID && s.Attributes["kagenti.exchange.result"] == "issued"
		})
		for _, o := range got {
			names = append(names, o.Name+" "+o.Resource["service.name"])
			if o.Name != "kagenti.authbridge.outbound" || !strings.HasPrefix(o.Attributes["server.address"], "callee.") {
				continue
			}
			child := func(name string, ok func(receivedSpan) bool) (receivedSpan, bool) {
				i := slices.IndexFunc(got, func(s receivedSpan) bool {
					return s.Name == name && s.TraceID == o.TraceID && s.ParentSpanID == o.SpanID && ok(s)
				})
				if i < 0 {
					return receivedSpan{}, false
				}
				return got[i], true
			}
			e, okE := child("kagenti.authbridge.exchange", func(s receivedSpan) bool { return s.Attributes["kagenti.exchange.audience"] == calleeID })
			i, okI := child("kagenti.authbridge.inbound", func(s receivedSpan) bool {
				return s.Attributes["kagenti.caller"] == callerID && s.Attributes["kagenti.result"] == "allowed"
			})
			if okE && okI {
				outbound, exchange, inbound = o, e, i
			}
		}
		return issued && inbound.SpanID != "", strings.Join(names, ", "), nil
	})
	for _, s := range []receivedSpan{inbound, exchange, outbound} {
		if s.Resource["kagenti.component"] != "kagenti-authbridge" {
			t.Errorf("span %s: resource %v, want kagenti.component=kagenti-authbridge", s.Name, s.Resource)
		}
		for k, v := range s.Attributes {
			if strings.Contains(v, userToken) || strings.Contains(userToken, v) && len(v) > 20 {
				t.Errorf("span %s: attribute %s holds (part of) the user's token", s.Name, k)
			}
		}
	}
	t.Logf("spans at the receiver %s after the first call", time.Since(start).Round(time.Second))
	t.Logf("spans: caller's outbound %s → exchange %s (%s) → callee's inbound %s (caller %s), trace %s",
		outbound.SpanID, exchange.SpanID, exchange.Attributes["kagenti.exchange.result"], inbound.SpanID, inbound.Attributes["kagenti.caller"], inbound.TraceID)
}
