package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
	"github.com/kagenti/platform/e2e/framework/agent"
)

// TestKindIdentityFlow: the identity flow with real pods on kind, SPIFFE on. The injector
// (installed with the umbrella chart) injects proxy-init, spiffe-helper, client-registration and the
// authbridge into two agents, run by the real kubelet under runc from our images; proxy-init's
// nftables rules run in the pods' own network namespaces. The caller's spiffe-helper gets its JWT
// SVID from the real SPIRE agent on its node (hack/kind/spire.yaml: k8s_psat node attestation, the
// k8s workload attestor, the socket on the node by hostPath), and the caller authenticates its
// exchanges with it: the dev IdP in the test's namespace verifies it against SPIRE's trust bundle
// (no client secret exists for the caller). The caller's outbound proxy exchanges the user's token
// for the callee's audience (RFC 8693), and the callee's inbound proxy validates it; the callee
// registered with the dev IdP (RFC 7591). The caller's agent does not start before its identity is
// ready (no SVID, no agent), the agents' probes pass through the authbridge (the injector's rewrite)
// under a real kubelet, a Job with injection completes, and a route change reaches the running
// sidecars through the kubelet's ConfigMap volume refresh, with no restart.
//
// The client-secret path (registration, then exchanges authenticated with the registered secret)
// is TestKindProxyModeIdentityFlow's.
func TestKindIdentityFlow(t *testing.T) {
	requireKind(t)
	c := framework.Client(t)
	framework.RequirePillar(t, c, "injector")
	framework.RequirePillar(t, c, "tokenexchange")
	requireKindSPIRE(t, c)
	ns := framework.Namespace(t, c, "kind-idflow", map[string]string{"kagenti.io/injection": "enabled"})
	callerID := "spiffe://cluster.local/ns/" + ns + "/sa/caller"
	calleeID := "spiffe://cluster.local/ns/" + ns + "/sa/callee"
	issuer := "http://idp." + ns + ".svc:9080"

	copySPIREBundle(t, c, ns)
	createKindIdP(t, c, ns, kindIdP{issuer: issuer, clients: []string{"user:user-secret:" + callerID}, spiffeBundle: true})
	calleeHost := "callee." + ns + ".svc"
	validation := kindValidation(issuer)
	// The caller does not register: it authenticates its exchanges with its JWT SVID, whose
	// audience (spiffe.audience) is the IdP. The callee registers (RFC 7591) and validates.
	createKindTokenExchange(t, c, ns, "caller-auth", map[string]any{
		"targetRef":          map[string]any{"kind": "Deployment", "name": "caller"},
		"spiffe":             map[string]any{"audience": issuer},
		"clientRegistration": map[string]any{"enabled": false},
		"inbound":            map[string]any{"validation": validation},
		"outbound": map[string]any{"tokenExchange": map[string]any{
			"tokenUrl": issuer + "/oauth/token", "destinationRules": exchangeRoute(calleeHost, calleeID)}},
	})
	calleeSpec := validatingOnly(deploymentRef("callee"), map[string]any{"validation": validation})
	calleeSpec["clientRegistration"] = kindOIDC(issuer)
	createKindTokenExchange(t, c, ns, "callee-auth", calleeSpec)
	// The TokenExchanges first: their controller writes each workload's ConfigMap as soon as the
	// Deployment exists, before its pod starts, so the pod's startup settings (spiffe-helper's
	// audience) are the TokenExchange's. In the other order a pod may start on the defaults, and
	// the controller restarts it (TestKindPodStartedBeforeItsConfigMapIsRestarted): a minute more.
	// Before the agents too: an AgentTrace per agent, both to one OTLP receiver, so that each pod's
	// authbridge starts with the trace files in place and exports its spans there.
	traced := t.Run("an AgentTrace for each agent, to an OTLP receiver", func(t *testing.T) {
		framework.RequirePillar(t, c, "agenttrace")
		createOTLPSink(t, c, ns)
		for _, name := range []string{"caller", "callee"} {
			at := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
				"targetRef": deploymentRef(name),
				"exporters": []any{map[string]any{"type": "otlp", "protocol": "http/protobuf", "endpoint": "http://otlp-sink." + ns + ".svc:4318"}},
				"sampling":  map[string]any{"type": "always_on"},
			}}}
			at.SetGroupVersionKind(agentTraceGVK)
			at.SetNamespace(ns)
			at.SetName(name)
			framework.Create(t, c, at)
		}
	})
	createKindAgent(t, c, ns, "caller", map[string]string{"kagenti.io/spiffe": "enabled"}, transparentAgent)
	createKindAgent(t, c, ns, "callee", nil, transparentAgent, kindAgentCard("Callee", "http://callee."+ns+".svc:8080"))

	// SPIRE has no entry for the caller yet: spiffe-helper runs and gets no SVID. The native
	// sidecars' startup probes (spiffe-helper's readiness, then the authbridge's, which needs the
	// SVID) hold the containers after them back, and the kubelet does not start the agent.
	// Registering the caller releases it.
	t.Run("the agent does not start before its identity is ready", func(t *testing.T) {
		pending := waitContainerRunning(t, c, ns, "caller", "spiffe-helper")
		assertContainerNotStarted(t, c, pending, "agent", 10*time.Second)
	})
	registered := time.Now().Truncate(time.Second)
	if id := registerKindWorkload(t, ns, "caller"); id != callerID {
		t.Fatalf("registered %s, want %s", id, callerID)
	}
	caller := readyPodOf(t, c, ns, "caller")
	callee := readyPodOf(t, c, ns, "callee")
	t.Run("the agent started once SPIRE issued the caller's identity", func(t *testing.T) {
		if started := containerStarted(t, caller.Status.ContainerStatuses, "agent"); started.Before(registered) {
			t.Fatalf("the caller's agent started at %v, before SPIRE had an entry for the caller (%v)", started, registered)
		}
		t.Logf("SPIRE entry created → the caller's agent started: %v", containerStarted(t, caller.Status.ContainerStatuses, "agent").Sub(registered).Round(time.Second))
	})

	t.Run("the sidecars start before the agent, and nothing restarts", func(t *testing.T) {
		for _, p := range []*corev1.Pod{caller, callee} {
			agentStart := containerStarted(t, p.Status.ContainerStatuses, "agent")
			for _, s := range p.Status.InitContainerStatuses {
				if s.State.Running == nil {
					continue // proxy-init has exited
				}
				if s.State.Running.StartedAt.After(agentStart) {
					t.Errorf("pod %s: sidecar %s started at %v, after the agent (%v)", p.Name, s.Name, s.State.Running.StartedAt, agentStart)
				}
			}
			assertNoRestarts(t, p)
		}
	})

	t.Run("the agent's probes are rewritten to the authbridge and pass under the kubelet", func(t *testing.T) {
		for _, p := range []*corev1.Pod{caller, callee} {
			probe := p.Spec.Containers[0].ReadinessProbe
			if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != "/app-health/agent/readyz" {
				t.Fatalf("pod %s: readiness probe %+v; want the rewrite to the authbridge", p.Name, probe)
			}
		}
		// readyPodOf waited for ContainersReady: the kubelet's own probes passed.
	})

	t.Run("spiffe-helper wrote the caller's JWT SVID from the SPIRE agent", func(t *testing.T) {
		claims := jwtClaims(t, nodeFile(t, caller, "kagenti-shared", "jwt_svid.token"))
		if claims["sub"] != callerID || fmt.Sprint(claims["aud"]) != fmt.Sprint([]any{issuer}) {
			t.Fatalf("JWT SVID claims %v: want sub %s, aud [%s]", claims, callerID, issuer)
		}
	})

	user := clientCredentialsToken(t, "http://"+framework.PortForward(t, ns, podOf(t, c, ns, "idp"), 9080), "user", "user-secret")
	callerInbound := "http://" + framework.PortForward(t, ns, caller.Name, inboundPort)
	call := func(t *testing.T) agent.CallResult { return kindCall(t, callerInbound, calleeHost, user) }

	var summary []string // what make run-kind prints
	t.Run("caller → callee through the Service: exchanged for the callee's audience", func(t *testing.T) {
		got := decodeReport(t, call(t))
		if got.Pod != callee.Name {
			t.Fatalf("answered by %q, want the callee's agent %s", got.Pod, callee.Name)
		}
		exchanged := bearer(got.Headers)
		if exchanged == user {
			t.Fatal("the callee received the user's original token: no exchange")
		}
		claims := jwtClaims(t, exchanged)
		if fmt.Sprint(claims["aud"]) != fmt.Sprint([]any{calleeID}) {
			t.Errorf("exchanged token audience %v, want [%s]", claims["aud"], calleeID)
		}
		// The caller has no client secret: the IdP authenticated it by its JWT SVID.
		if act, _ := claims["act"].(map[string]any); act["sub"] != callerID {
			t.Errorf("exchanged token act %v: want the caller %s (authenticated by its JWT SVID)", claims["act"], callerID)
		}
		svid := jwtClaims(t, nodeFile(t, caller, "kagenti-shared", "jwt_svid.token"))
		summary = append(summary,
			fmt.Sprintf("%s (pod %s) called http://%s:%d/tasks with the user's token (aud %v)", "caller", caller.Name, calleeHost, inboundPort, jwtClaims(t, user)["aud"]),
			fmt.Sprintf("its JWT SVID from the SPIRE agent, written by spiffe-helper: sub %v, aud %v", svid["sub"], svid["aud"]),
			fmt.Sprintf("its outbound proxy exchanged the token at %s: the callee's agent (pod %s) got aud %v, act %v, scope %v", issuer, got.Pod, claims["aud"], claims["act"], claims["scope"]))
	})

	t.Run("the authbridges' spans reach the AgentTrace's receiver: one trace from the caller's outbound to the callee's agent", func(t *testing.T) {
		if !traced {
			t.Skip("no AgentTrace (the agenttrace pillar is not installed)")
		}
		assertKindAuthbridgeSpans(t, c, ns, callerID, calleeID, user, func() { call(t) })
	})

	t.Run("the callee registered with the dev IdP (RFC 7591)", func(t *testing.T) {
		framework.Eventually(t, time.Minute, "callee-auth: idpRegistered", func(ctx context.Context) (bool, string, error) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(tokenExchangeGVK)
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "callee-auth"}, u); err != nil {
				return false, "", err
			}
			registered, _, _ := unstructured.NestedBool(u.Object, "status", "identityStatus", "idpRegistered")
			return registered, fmt.Sprint(u.Object["status"]), nil
		})
	})

	t.Run("the callee's inbound refuses the user's token: wrong audience", func(t *testing.T) {
		status, body := httpGet(t, "http://"+framework.PortForward(t, ns, callee.Name, inboundPort)+"/tasks", "", user)
		if status != http.StatusUnauthorized {
			t.Fatalf("direct call with the user's token: %d %s; want 401", status, body)
		}
		summary = append(summary, fmt.Sprintf("the user's own token sent straight to the callee: %d", status))
	})
	if os.Getenv("KAGENTI_KIND_SUMMARY") == "1" { // make run-kind: what was measured, for a reader
		fmt.Printf("\n== the identity flow on kind (namespace %s), as measured ==\n  %s\n\n", ns, strings.Join(summary, "\n  "))
	}

	t.Run("kagenti describe shows the callee's calls by caller, read from its pods' authbridge", func(t *testing.T) {
		// Through the API server's pod proxy to the authbridge's inbound status port: the edge
		// caller → callee that the calls above made, counted by the callee's sidecar.
		out := kagenti(t, "describe", "deployment/callee", "-n", ns)
		if out.code != 0 {
			t.Fatalf("kagenti describe: exit %d: %s", out.code, out.stderr)
		}
		if !strings.Contains(out.stdout, "Calls into it (delegation graph, counted by 1 pod(s)' authbridge):") ||
			!regexp.MustCompile(`(?m)^  `+regexp.QuoteMeta(callerID)+`: [1-9][0-9]* allowed, 0 denied$`).MatchString(out.stdout) {
			t.Fatalf("kagenti describe deployment/callee does not show the calls from %s:\n%s", callerID, out.stdout)
		}
	})

	t.Run("a route change reaches the running sidecar through the kubelet's ConfigMap refresh", func(t *testing.T) {
		// The route becomes a pass-through: the callee now gets the user's token, and refuses it.
		start := time.Now()
		patchKindTokenExchange(t, c, ns, "caller-auth", []any{map[string]any{"match": map[string]any{"host": calleeHost + ":" + strconv.Itoa(inboundPort)}}})
		framework.Eventually(t, 4*time.Minute, "the caller's call passes the user's token on (refused by the callee)", func(context.Context) (bool, string, error) {
			res := call(t)
			return res.Status == http.StatusUnauthorized, fmt.Sprintf("%d %s", res.Status, res.Body), nil
		})
		t.Logf("TokenExchange route changed → the running sidecar follows: %v (the kubelet's ConfigMap sync)", time.Since(start).Round(time.Second))
		var now corev1.Pod
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(caller), &now); err != nil {
			t.Fatal(err)
		}
		assertNoRestarts(t, &now)
	})

	t.Run("a Job with injection completes", func(t *testing.T) {
		framework.Create(t, c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: ns}})
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: ns, Labels: map[string]string{"kagenti.io/inject": "enabled"}},
			Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "batch"}},
					Spec: corev1.PodSpec{
						ServiceAccountName: "batch", RestartPolicy: corev1.RestartPolicyNever,
						AutomountServiceAccountToken: ptr.To(false),
						Containers:                   []corev1.Container{{Name: "work", Image: framework.ShellImage(), Command: []string{"bash", "-c", "exit 0"}}},
					},
				},
			},
		}
		framework.Create(t, c, job)
		createKindTokenExchange(t, c, ns, "batch-auth", validatingOnly(map[string]any{"apiVersion": "batch/v1", "kind": "Job", "name": "batch"},
			map[string]any{"validation": validation}))
		framework.Eventually(t, 3*time.Minute, "Job batch complete", func(ctx context.Context) (bool, string, error) {
			var j batchv1.Job
			if err := c.Get(ctx, client.ObjectKeyFromObject(job), &j); err != nil {
				return false, "", err
			}
			for _, cond := range j.Status.Conditions {
				if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
					return false, "", fmt.Errorf("job failed: %s", cond.Message)
				}
				if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
					return true, "", nil
				}
			}
			return false, fmt.Sprintf("%+v", j.Status), nil
		})
	})

	// Last: the callee's AgentCard, unsigned, gets a restrictive NetworkPolicy where netpol runs.
	t.Run("the discovery API answers the delegation graph, read from the callee's authbridge", func(t *testing.T) {
		assertKindDiscoveryGraph(t, c, ns, "callee", callerID)
	})
}

// exchangeRoute: calls to host on the inbound port get a token for audience.
func exchangeRoute(host, audience string) []any {
	return []any{map[string]any{"match": map[string]any{"host": host + ":" + strconv.Itoa(inboundPort)},
		"target": map[string]any{"audience": audience, "scopes": []any{"agent:invoke"}}}}
}

// kindValidation validates incoming tokens of the test's dev IdP at issuer.
func kindValidation(issuer string) map[string]any {
	return map[string]any{"issuer": issuer, "jwksUrl": issuer + "/keys"}
}

// kindOIDC is clientRegistration with the test's dev IdP at issuer as the oidc provider (RFC 7591).
func kindOIDC(issuer string) map[string]any {
	return map[string]any{"provider": "oidc", "oidc": map[string]any{
		"issuer": issuer, "tokenUrl": issuer + "/oauth/token", "jwksUrl": issuer + "/keys", "registrationUrl": issuer + "/register"}}
}

// validatingOnly is the spec of a TokenExchange for target whose sidecars validate incoming
// tokens as inbound says and neither register nor exchange (nothing needs credentials).
func validatingOnly(target, inbound map[string]any) map[string]any {
	return map[string]any{"targetRef": target, "clientRegistration": map[string]any{"enabled": false},
		"inbound": inbound, "outbound": map[string]any{"tokenExchange": map[string]any{"enabled": false}}}
}

func deploymentRef(name string) map[string]any {
	return map[string]any{"kind": "Deployment", "name": name}
}

// kindCall asks the caller's agent, through its inbound proxy at callerInbound (a port-forward),
// with the user's token, to call http://<calleeHost>:8080/tasks, and returns what the agent got.
// The callee's Service may be new: until kube-proxy on the caller's node has programmed its
// ClusterIP, the outbound proxy's dial fails (502 upstream_unavailable), which is retried for a
// minute; anything else is the answer.
func kindCall(t *testing.T, callerInbound, calleeHost, user string) agent.CallResult {
	t.Helper()
	u := callerInbound + "/call?" + url.Values{"url": {"http://" + calleeHost + ":" + strconv.Itoa(inboundPort) + "/tasks"}}.Encode()
	var res agent.CallResult
	framework.Eventually(t, time.Minute, "the caller's call reaching the callee's Service", func(context.Context) (bool, string, error) {
		status, body := httpGet(t, u, "", user)
		if status != http.StatusOK {
			return false, "", fmt.Errorf("calling the caller's agent through its inbound proxy: %d %s", status, body)
		}
		if err := json.Unmarshal([]byte(body), &res); err != nil {
			return false, "", fmt.Errorf("the caller's agent answered %q: %v", body, err)
		}
		return !(res.Status == http.StatusBadGateway && strings.Contains(res.Body, "upstream_unavailable")), res.Body, nil
	})
	return res
}

// kindIdP is how a test's dev IdP runs.
type kindIdP struct {
	issuer  string
	clients []string // --client id:secret[:audiences]
	// spiffeBundle: JWT SVIDs are client assertions, verified against the SPIRE bundle that
	// copySPIREBundle put into the namespace; the caller's client is then its SPIFFE ID, which the
	// user's token names among its audiences, so the IdP requires it there, as Keycloak does.
	// Without it the caller authenticates with the client it registered, whose ID is the IdP's
	// choice, unknown to the test: the IdP does not require it among the audiences.
	spiffeBundle bool
	// args are more flags (e.g. --registrar).
	args []string
}

// createKindIdP runs the dev IdP as a Deployment with a Service idp:9080 in ns.
func createKindIdP(t *testing.T, c client.Client, ns string, idp kindIdP) {
	args := []string{"--addr", "0.0.0.0:9080", "--issuer", idp.issuer}
	for _, cl := range idp.clients {
		args = append(args, "--client", cl)
	}
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	if idp.spiffeBundle {
		args = append(args, "--spiffe-bundle", "/etc/spire-bundle/"+spireBundleKey, "--spiffe-trust-domain", "cluster.local")
		volumes = []corev1.Volume{{Name: "spire-bundle", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: spireBundleConfigMap}}}}}
		mounts = []corev1.VolumeMount{{Name: "spire-bundle", MountPath: "/etc/spire-bundle", ReadOnly: true}}
	} else {
		args = append(args, "--require-client-in-audience=false")
	}
	args = append(args, idp.args...)
	labels := map[string]string{"app": "idp"}
	framework.Create(t, c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "idp", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					SecurityContext:              restrictedPod(),
					Volumes:                      volumes,
					Containers: []corev1.Container{{
						Name: "idp", Image: framework.IdPImage(), Args: args,
						Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 9080}},
						SecurityContext: restrictedContainer(),
						VolumeMounts:    mounts,
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/.well-known/openid-configuration", Port: intstr.FromString("http")}}, PeriodSeconds: 1},
					}},
				},
			},
		},
	})
	framework.Create(t, c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "idp", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 9080, TargetPort: intstr.FromString("http")}}},
	})
	readyPodOf(t, c, ns, "idp")
}

// kindAgent is how a test agent runs in one interception mode.
type kindAgent struct {
	// target is the port its Service targets: the inbound port, where transparent mode's redirect
	// catches requests, or the authbridge's named port, where proxy mode serves them.
	target intstr.IntOrString
	// listen is the agent's address: loopback in both modes, as docs/identity.md advises (in proxy
	// mode nothing else keeps a caller off the agent's own port). The injector rewrites the probes
	// to the authbridge, which runs them there; the kubelet could not reach the agent on the pod IP.
	listen string
}

var (
	transparentAgent = kindAgent{target: intstr.FromInt(inboundPort), listen: "127.0.0.1:" + strconv.Itoa(agentPort)}
	proxyModeAgent   = kindAgent{target: intstr.FromString("kagenti-inbound"), listen: "127.0.0.1:" + strconv.Itoa(agentPort)}
)

// createKindAgent: a ServiceAccount, a Deployment of the stand-in agent labelled for injection (and
// with the extra labels), with its own HTTP probes on its own port, and a Service name:8080 whose
// target is mode's.
func createKindAgent(t *testing.T, c client.Client, ns, name string, extra map[string]string, mode kindAgent, env ...corev1.EnvVar) {
	framework.Create(t, c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	labels := map[string]string{"app": name}
	workloadLabels := map[string]string{"app": name, "kagenti.io/inject": "enabled"}
	for k, v := range extra {
		workloadLabels[k] = v
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: workloadLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:           name,
					AutomountServiceAccountToken: ptr.To(false),
					SecurityContext:              restrictedPod(),
					Containers: []corev1.Container{{
						Name: "agent", Image: framework.AgentImage(),
						Ports:           []corev1.ContainerPort{{Name: "a2a", ContainerPort: agentPort}},
						ReadinessProbe:  agentProbe("/ready"),
						LivenessProbe:   agentProbe("/live"),
						SecurityContext: restrictedContainer(),
						Env: append([]corev1.EnvVar{
							{Name: "AGENT_LISTEN", Value: mode.listen},
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
						}, env...),
					}},
				},
			},
		},
	}
	framework.Create(t, c, d)
	if _, ok := d.Spec.Template.Annotations["kagenti.io/injection-status"]; !ok {
		t.Fatalf("Deployment %s was not injected", name)
	}
	framework.Create(t, c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: inboundPort, TargetPort: mode.target}}},
	})
}

// restrictedPod: the pod-level half of Pod Security restricted (the runtime's default seccomp
// profile), which the injected containers inherit.
func restrictedPod() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
}

// restrictedContainer: nonroot, read-only root filesystem, no capabilities, as our images run.
func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), ReadOnlyRootFilesystem: ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

func createKindTokenExchange(t *testing.T, c client.Client, ns, name string, spec map[string]any) {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(tokenExchangeGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	framework.Create(t, c, u)
}

// patchKindTokenExchange replaces the TokenExchange's outbound destination rules.
func patchKindTokenExchange(t *testing.T, c client.Client, ns, name string, rules []any) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(tokenExchangeGVK)
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(u.Object, rules, "spec", "outbound", "tokenExchange", "destinationRules"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(context.Background(), u); err != nil {
		t.Fatal(err)
	}
}

// podOf returns the name of the one pod labelled app=name.
func podOf(t *testing.T, c client.Client, ns, name string) string {
	return readyPodOf(t, c, ns, name).Name
}

// readyPodOf waits for the pod labelled app=name to be Running with every container ready (the
// kubelet's probes passed) and returns it.
func readyPodOf(t *testing.T, c client.Client, ns, name string) *corev1.Pod {
	t.Helper()
	return readyPodMatching(t, c, ns, name, map[string]string{"app": name})
}

// readyPodMatching is readyPodOf for the pods of what (a name for the messages) that carry labels.
func readyPodMatching(t *testing.T, c client.Client, ns, what string, labels map[string]string) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	framework.Eventually(t, 4*time.Minute, "pod of "+what+" ready", func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return false, "", err
		}
		var states []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
				pod = p
				return true, "", nil
			}
			states = append(states, fmt.Sprintf("%s %s %s", p.Name, p.Status.Phase, containerStates(&p)))
		}
		return false, strings.Join(states, "; "), nil
	})
	return &pod
}

// containerStates summarises why a pod is not ready: each container's state and restarts.
func containerStates(p *corev1.Pod) string {
	var out []string
	for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		state := "running"
		switch {
		case s.State.Waiting != nil:
			state = "waiting " + s.State.Waiting.Reason + " " + s.State.Waiting.Message
		case s.State.Terminated != nil:
			state = fmt.Sprintf("terminated %s (%d)", s.State.Terminated.Reason, s.State.Terminated.ExitCode)
		}
		out = append(out, fmt.Sprintf("%s: %s ready=%v restarts=%d", s.Name, state, s.Ready, s.RestartCount))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func containerStarted(t *testing.T, statuses []corev1.ContainerStatus, name string) time.Time {
	for _, s := range statuses {
		if s.Name == name && s.State.Running != nil {
			return s.State.Running.StartedAt.Time
		}
	}
	t.Fatalf("container %s is not running", name)
	return time.Time{}
}

// waitContainerRunning waits until the pod labelled app=name has container (init or not) running,
// and returns the pod.
func waitContainerRunning(t *testing.T, c client.Client, ns, name, container string) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	framework.Eventually(t, 3*time.Minute, "container "+container+" of "+name+" running", func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
			return false, "", err
		}
		var states []string
		for _, p := range pods.Items {
			if s := containerStatus(&p, container); s != nil && s.State.Running != nil {
				pod = p
				return true, "", nil
			}
			states = append(states, p.Name+" "+containerStates(&p))
		}
		return false, strings.Join(states, "; "), nil
	})
	return &pod
}

// assertContainerNotStarted: the pod's container does not start for d.
func assertContainerNotStarted(t *testing.T, c client.Client, pod *corev1.Pod, container string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		var p corev1.Pod
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		if s := containerStatus(&p, container); s != nil && (s.State.Running != nil || s.State.Terminated != nil) {
			t.Fatalf("pod %s: container %s started before the pod's identity was ready: %s", p.Name, container, containerStates(&p))
		}
	}
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if s.Name == name {
			return &s
		}
	}
	return nil
}

func assertNoRestarts(t *testing.T, p *corev1.Pod) {
	t.Helper()
	for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if s.RestartCount > 0 {
			t.Errorf("pod %s: container %s restarted %d times", p.Name, s.Name, s.RestartCount)
		}
	}
}
