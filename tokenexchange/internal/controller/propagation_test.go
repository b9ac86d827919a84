package controller_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// podNetwork stands in for the cluster network between the controller and pod IPs: envtest has
// no kubelet, so the pods' identity sidecars are real sidecar status servers on loopback, and the
// controller's dials of podIP:port are routed to them.
var podNetwork = &fakePodNetwork{routes: map[string]string{}}

type fakePodNetwork struct {
	mu     sync.Mutex
	routes map[string]string
}

func (n *fakePodNetwork) route(podAddr, listener string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.routes[podAddr] = listener
}

func (n *fakePodNetwork) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	to, ok := n.routes[addr]
	n.mu.Unlock()
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, to)
}

var nextPodIP atomic.Int32

// rolePod is one pod of the workload with its kagenti-authbridge roles running for real: each
// follows the pod's ConfigMap volume (a directory this test updates the way the kubelet does)
// and serves /status, reachable at the pod IP's status port.
type rolePod struct {
	pod *corev1.Pod
	vol string
	gen int
	// refusal, when set, is what the client-registration role refuses (as register.Runner
	// reports it: on /status, and as the reason it is not ready).
	refusal atomic.Pointer[sidecar.Refusal]
}

func startRolePod(t *testing.T, ns, name, app string) *rolePod {
	t.Helper()
	sidecars := []string{contract.ComponentSpiffeHelper, contract.ComponentAuthProxy, contract.ComponentEnvoyProxy}
	return runRolePod(t, injectedPod(ns, name, app, sidecars), sidecars,
		map[string]int{contract.ComponentAuthProxy: sidecar.InboundStatusPort, contract.ComponentEnvoyProxy: sidecar.OutboundStatusPort})
}

// startCombinedRolePod is startRolePod for a pod injected with the combined sidecar: the
// authbridge container runs register, inbound and outbound, each with its own status server.
func startCombinedRolePod(t *testing.T, ns, name, app string) *rolePod {
	t.Helper()
	return runRolePod(t, combinedPod(ns, name, app, "register", "inbound", "outbound"),
		[]string{contract.ComponentSpiffeHelper, contract.ContainerAuthbridge},
		map[string]int{contract.ComponentClientRegistration: sidecar.RegisterStatusPort,
			contract.ComponentAuthProxy: sidecar.InboundStatusPort, contract.ComponentEnvoyProxy: sidecar.OutboundStatusPort})
}

// runRolePod creates p with its sidecars ready and a pod IP, and runs the roles behind the IP's
// status ports.
func runRolePod(t *testing.T, p *corev1.Pod, sidecars []string, roles map[string]int) *rolePod {
	t.Helper()
	return runRolePodWith(t, p, sidecars, roles, nil)
}

// runRolePodWith is runRolePod with the register role refusing refusal (nil: none) from the start.
func runRolePodWith(t *testing.T, p *corev1.Pod, sidecars []string, roles map[string]int, refusal *sidecar.Refusal) *rolePod {
	t.Helper()
	return runRolePodOn(t, p, sidecars, roles, refusal, nil)
}

// runRolePodOn is runRolePodWith whose roles start on the volume as projected leaves it (nil:
// empty, as when the ConfigMap does not exist yet).
func runRolePodOn(t *testing.T, p *corev1.Pod, sidecars []string, roles map[string]int, refusal *sidecar.Refusal, projected func(*rolePod)) *rolePod {
	t.Helper()
	ctx := context.Background()
	ns, name, app := p.Namespace, p.Name, p.Labels["app"]
	must(t, k8s.Create(ctx, p))
	ip := fmt.Sprintf("10.251.%d.%d", nextPodIP.Add(1)/250, nextPodIP.Load()%250+1)
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(p), p))
	p.Status.PodIP = ip
	p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	must(t, k8s.Status().Update(ctx, p))
	setPodStatus(t, p, sidecars, nil)

	rp := &rolePod{pod: p, vol: t.TempDir()}
	rp.refusal.Store(refusal)
	if projected != nil {
		projected(rp)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for role, port := range roles {
		cfg, err := sidecar.NewConfig(roleSource(rp.vol, ns, app, name), zaptest.NewLogger(t).Named(role))
		require.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		podNetwork.route(net.JoinHostPort(ip, fmt.Sprint(port)), ln.Addr().String())
		wg.Add(2)
		go func() { defer wg.Done(); cfg.Run(runCtx, 50e6) }()
		var readiness sidecar.Readiness
		var refusal sidecar.Refusals
		if role == contract.ComponentClientRegistration {
			refusal = rp.refusal.Load
			readiness = func() []string {
				if r := rp.refusal.Load(); r != nil {
					return []string{"registration refused: " + r.Message}
				}
				return nil
			}
		}
		go func() {
			defer wg.Done()
			_ = sidecar.ServeListener(runCtx, ln, sidecar.AdminHandler(role, cfg, readiness, refusal, nil), zaptest.NewLogger(t))
		}()
	}
	return rp
}

// roleSource is what the injector gives the roles: the identity defaults and the workload.
func roleSource(dir, ns, workload, pod string) sidecar.Source {
	uid := int64(1337)
	return sidecar.Source{
		Dir:      dir,
		Workload: authconfig.Workload{Namespace: ns, Name: workload, PodName: pod, ServiceAccount: workload},
		Defaults: authconfig.Spec{
			Spiffe: &authconfig.SpiffeSpec{TrustDomain: "cluster.local", SocketPath: "/run/spire/agent-sockets/agent.sock", Audience: "kagenti-agents"},
			ClientRegistration: &authconfig.ClientRegistrationSpec{Keycloak: &authconfig.KeycloakSpec{
				URL: "http://keycloak:8080", Realm: "default", ClientNameTemplate: "{{.Namespace}}/{{.WorkloadName}}"}},
			Inbound: &authconfig.InboundSpec{Port: ptr.To[int32](8080), TargetPort: ptr.To[int32](8081)},
			Outbound: &authconfig.OutboundSpec{
				TrafficInterception: &authconfig.TrafficInterceptionSpec{ProxyPort: ptr.To[int32](15123), ProxyUID: &uid},
				TokenExchange:       &authconfig.TokenExchangeSpec{DefaultTarget: &authconfig.ExchangeTarget{Audience: "downstream"}},
			},
		},
	}
}

// project writes files into the pod's volume the way the kubelet's atomic writer does: a new
// timestamped directory, ..data swapped by a rename, keys as symlinks through ..data.
func (rp *rolePod) project(t *testing.T, files map[string]string) {
	t.Helper()
	rp.gen++
	ts := fmt.Sprintf("..2026_11_26_%06d", rp.gen)
	require.NoError(t, os.MkdirAll(filepath.Join(rp.vol, ts), 0o755))
	for k, v := range files {
		require.NoError(t, os.WriteFile(filepath.Join(rp.vol, ts, k), []byte(v), 0o644))
		if _, err := os.Lstat(filepath.Join(rp.vol, k)); err != nil {
			require.NoError(t, os.Symlink(filepath.Join("..data", k), filepath.Join(rp.vol, k)))
		}
	}
	tmp := filepath.Join(rp.vol, "..data_tmp")
	require.NoError(t, os.Symlink(ts, tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(rp.vol, "..data")))
}

// sync projects the ConfigMap as the API server holds it now, and returns its content hash.
func (rp *rolePod) sync(t *testing.T, ns, cmName string) string {
	t.Helper()
	cm, err := getCM(context.Background(), ns, cmName)
	require.NoError(t, err)
	rp.project(t, cm.Data)
	return cm.Annotations[contract.ContentHashAnnotation]
}

func waitPropagation(t *testing.T, ns, what string, ok func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool) *v1alpha1.TokenExchange {
	t.Helper()
	var last *v1alpha1.TokenExchange
	eventually(t, what, func(ctx context.Context) (bool, string) {
		last = getTX(ctx, t, ns, "tx")
		c := condition(last, v1alpha1.ConditionConfigPropagated)
		if c == nil {
			return false, "no ConfigPropagated condition"
		}
		return ok(last, c), fmt.Sprintf("configuredPods=%d pods=%d contentHash=%s %s/%s: %s",
			last.Status.ConfiguredPods, last.Status.Pods, last.Status.ContentHash, c.Status, c.Reason, c.Message)
	})
	return last
}

// configuredPods counts the pods whose sidecars run the ConfigMap's current content, read from
// the sidecars themselves: a pod that mounts the ConfigMap but runs an older content (the kubelet
// has not updated its volume yet), or rejected the new one, does not count; startup settings that
// changed are reported with the pods to restart.
func TestConfiguredPodsFollowTheRunningContentHash(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	const cmName = "agent-token-exchange"
	must(t, k8s.Create(ctx, deployment(ns, "agent", 2, true)))
	te := tokenExchange(ns, "tx", "agent")
	te.Spec.Outbound = &v1alpha1.OutboundSpec{TokenExchange: &v1alpha1.OutboundTokenExchangeSpec{DefaultTarget: &v1alpha1.ExchangeTarget{Audience: "v1"}}}
	must(t, k8s.Create(ctx, te))
	waitCondition(t, ns, "tx", v1alpha1.ConditionConfigMapReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)

	pods := []*rolePod{startRolePod(t, ns, "agent-0", "agent"), startRolePod(t, ns, "agent-1", "agent")}

	// The volumes are still empty: both pods mount the ConfigMap, neither runs it.
	got := waitPropagation(t, ns, "2 pods, none on the content", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.Pods == 2 && c.Reason == v1alpha1.ReasonPropagating
	})
	assert.Equal(t, int32(0), got.Status.ConfiguredPods)
	c := condition(got, v1alpha1.ConditionConfigPropagated)
	assert.Contains(t, c.Message, "pod agent-0 (auth-proxy, envoy-proxy on the injector's defaults only)")

	// The kubelet updates one pod's volume: it counts, the other does not yet.
	hash1 := pods[0].sync(t, ns, cmName)
	got = waitPropagation(t, ns, "agent-0 on the content", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.ConfiguredPods == 1 && c.Reason == v1alpha1.ReasonPropagating
	})
	assert.Equal(t, hash1, got.Status.ContentHash)
	c = condition(got, v1alpha1.ConditionConfigPropagated)
	assert.Contains(t, c.Message, "1 of 2 pods run content "+hash1)
	assert.Contains(t, c.Message, "pod agent-1")
	assert.NotContains(t, c.Message, "pod agent-0")

	pods[1].sync(t, ns, cmName)
	got = waitPropagation(t, ns, "both pods on the content", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.ConfiguredPods == 2 && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonPropagated
	})
	assert.Equal(t, metav1.ConditionTrue, condition(got, v1alpha1.ConditionStartupSettingsCurrent).Status)
	assert.Equal(t, metav1.ConditionTrue, condition(got, v1alpha1.ConditionReady).Status)

	// A run-time change: the ConfigMap changes at once, the pods count again once they run it.
	must(t, updateRetrying(ctx, te, func() { te.Spec.Outbound.TokenExchange.DefaultTarget.Audience = "v2" }))
	got = waitPropagation(t, ns, "the new content is behind in both pods", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.ContentHash != hash1 && te.Status.ConfiguredPods == 0 && c.Reason == v1alpha1.ReasonPropagating
	})
	hash2 := got.Status.ContentHash
	for _, p := range pods {
		assert.Equal(t, hash2, p.sync(t, ns, cmName))
	}
	waitPropagation(t, ns, "both pods on the new content", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.ConfiguredPods == 2 && c.Reason == v1alpha1.ReasonPropagated
	})

	// A startup setting: the pods run the new content but keep the port they started with.
	must(t, updateRetrying(ctx, te, func() {
		te.Spec.Outbound.TrafficInterception = &v1alpha1.TrafficInterceptionSpec{ProxyPort: ptr.To[int32](15200)}
	}))
	waitPropagation(t, ns, "the proxy port change is behind", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.ContentHash != hash2 && c.Reason == v1alpha1.ReasonPropagating
	})
	for _, p := range pods {
		p.sync(t, ns, cmName)
	}
	got = waitPropagation(t, ns, "propagated, restart required", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		s := condition(te, v1alpha1.ConditionStartupSettingsCurrent)
		return te.Status.ConfiguredPods == 2 && c.Reason == v1alpha1.ReasonPropagated && s != nil && s.Reason == v1alpha1.ReasonRestartRequired
	})
	s := condition(got, v1alpha1.ConditionStartupSettingsCurrent)
	assert.Equal(t, metav1.ConditionFalse, s.Status)
	for _, want := range []string{"pod agent-0 (outbound.trafficInterception.proxyPort)", "pod agent-1 (outbound.trafficInterception.proxyPort)",
		"kubectl rollout restart deployment/agent"} {
		assert.Contains(t, s.Message, want)
	}

	// A content one pod's sidecars cannot use (here: not YAML) is reported with their error,
	// and that pod keeps running, and reporting, the previous content.
	hash3 := got.Status.ContentHash
	must(t, updateRetrying(ctx, te, func() { te.Spec.Outbound.TokenExchange.DefaultTarget.Audience = "v3" }))
	waitPropagation(t, ns, "v3 is behind", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.ContentHash != hash3 && c.Reason == v1alpha1.ReasonPropagating
	})
	pods[0].sync(t, ns, cmName)
	pods[1].project(t, map[string]string{authconfig.ConfigFile: "outbound: [not, a, mapping\n"})
	got = waitPropagation(t, ns, "agent-1 rejected it", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.ConfiguredPods == 1 && c.Reason == v1alpha1.ReasonConfigRejected
	})
	c = condition(got, v1alpha1.ConditionConfigPropagated)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Contains(t, c.Message, "pod agent-1 (auth-proxy: ")
	assert.Contains(t, c.Message, "config.yaml")
	assert.False(t, strings.Contains(c.Message, "pod agent-0"), c.Message)

	// A pod deleted goes out of the count; the one left runs the content.
	must(t, k8s.Delete(ctx, pods[1].pod, client.GracePeriodSeconds(0)))
	waitPropagation(t, ns, "one pod, on the content", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.Pods == 1 && te.Status.ConfiguredPods == 1 && c.Reason == v1alpha1.ReasonPropagated
	})
}

// A pod injected with the combined sidecar (one authbridge container running several roles) is
// followed like one with a container per role: each role's status port is asked.
func TestCombinedSidecarPodFollowsTheRunningContentHash(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	const cmName = "agent-token-exchange"
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, true)))
	must(t, k8s.Create(ctx, tokenExchange(ns, "tx", "agent")))
	waitCondition(t, ns, "tx", v1alpha1.ConditionConfigMapReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)

	pod := startCombinedRolePod(t, ns, "agent-0", "agent")
	got := waitPropagation(t, ns, "the pod mounts the content, its roles do not run it yet", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.Pods == 1 && c.Reason == v1alpha1.ReasonPropagating
	})
	assert.Contains(t, condition(got, v1alpha1.ConditionConfigPropagated).Message,
		"pod agent-0 (auth-proxy, client-registration, envoy-proxy on the injector's defaults only)", "every role of the container was asked")

	hash := pod.sync(t, ns, cmName)
	got = waitPropagation(t, ns, "the pod runs the content", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.ConfiguredPods == 1 && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonPropagated
	})
	assert.Equal(t, hash, got.Status.ContentHash)
	assert.Equal(t, v1alpha1.IdentityStatus{SpiffeEnabled: true, IdpRegistered: true, InboundProxyReady: true, OutboundProxyReady: true},
		*got.Status.IdentityStatus)
}

// TestClientOwnedElsewhereReachesTheTokenExchange is issue 26's refused takeover as the user sees
// it: the register role of a pod refuses a client owned by another workload, and the TokenExchange
// says so (ConfigPropagated=False and Stalled, reason ClientOwnedElsewhere, the message naming the
// client and its owner), with a Warning Event. Adopting the client makes it Ready again; a
// refusal that appears later, on a pod already counted, is reported too.
func TestClientOwnedElsewhereReachesTheTokenExchange(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	const cmName = "agent-token-exchange"
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, true)))
	must(t, k8s.Create(ctx, tokenExchange(ns, "tx", "agent")))
	waitCondition(t, ns, "tx", v1alpha1.ConditionConfigMapReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)

	refusal := &sidecar.Refusal{Reason: sidecar.ReasonClientOwnedElsewhere,
		Message: `client "` + ns + `/agent" (id 0f1e) in Keycloak realm default belongs to workload team-b/agent, not to ` + ns + `/agent, and is left untouched: choose another clientNameTemplate`}
	// The pod reports the refusal before the reconciler first asks it (its containers' readiness
	// is not what tells: the controller asks the roles).
	sidecars := []string{contract.ComponentSpiffeHelper, contract.ContainerAuthbridge}
	p := combinedPod(ns, "agent-0", "agent", "register", "inbound", "outbound")
	pod := runRolePodRefusing(t, p, sidecars, refusal)
	pod.sync(t, ns, cmName)
	got := waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonClientOwnedElsewhere)
	assert.Equal(t, metav1.ConditionTrue, condition(got, duck.ConditionStalled).Status, "Stalled: it needs a person, it does not resolve itself")
	assert.Equal(t, v1alpha1.PhaseError, got.Status.Phase)
	assert.Contains(t, got.Status.Message, "pod agent-0 (client-registration: "+refusal.Message+")")
	prop := condition(got, v1alpha1.ConditionConfigPropagated)
	assert.Equal(t, metav1.ConditionFalse, prop.Status)
	assert.Equal(t, v1alpha1.ReasonClientOwnedElsewhere, prop.Reason)
	assert.Contains(t, prop.Message, "belongs to workload team-b/agent")
	assert.Equal(t, int32(0), got.Status.ConfiguredPods, "a pod without credentials is not configured")
	waitEvent(t, ns, "tx", v1alpha1.ReasonClientOwnedElsewhere)

	// Adopted: the role registers, the TokenExchange is Ready.
	pod.refusal.Store(nil)
	waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)

	// Refused again later (the client's owner marker changed at the provider): the register role
	// fails its readiness probe, and the controller asks the pod again.
	pod.refusal.Store(refusal)
	setPodStatus(t, pod.pod, sidecars, map[string]bool{contract.ContainerAuthbridge: true})
	waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonClientOwnedElsewhere)
}

// runRolePodRefusing is runRolePod for a combined-sidecar pod whose register role refuses from
// the start.
func runRolePodRefusing(t *testing.T, p *corev1.Pod, sidecars []string, refusal *sidecar.Refusal) *rolePod {
	t.Helper()
	return runRolePodWith(t, p, sidecars, map[string]int{contract.ComponentClientRegistration: sidecar.RegisterStatusPort,
		contract.ComponentAuthProxy: sidecar.InboundStatusPort, contract.ComponentEnvoyProxy: sidecar.OutboundStatusPort}, refusal)
}

// A pod whose sidecars do not answer is reported, not counted, and not taken for one on an old
// content.
func TestUnreachablePodStatusIsReported(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, true)))
	must(t, k8s.Create(ctx, tokenExchange(ns, "tx", "agent")))
	sidecars := []string{contract.ComponentEnvoyProxy}
	p := injectedPod(ns, "agent-0", "agent", sidecars)
	must(t, k8s.Create(ctx, p))
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(p), p))
	p.Status.PodIP = "10.252.0.1" // no route: connection refused
	must(t, k8s.Status().Update(ctx, p))
	setPodStatus(t, p, sidecars, nil)
	got := waitPropagation(t, ns, "status unavailable", func(te *v1alpha1.TokenExchange, c *metav1.Condition) bool {
		return te.Status.Pods == 1 && c.Reason == v1alpha1.ReasonStatusUnavailable
	})
	assert.Equal(t, int32(0), got.Status.ConfiguredPods)
	assert.Contains(t, condition(got, v1alpha1.ConditionConfigPropagated).Message, "pod agent-0 (envoy-proxy: ")
}
