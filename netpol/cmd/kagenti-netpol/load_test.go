package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kagenti/platform/netpol/api"
	"github.com/kagenti/platform/netpol/internal/resources"
	"github.com/kagenti/platform/netpol/internal/view"
	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/duck/ducktest"
)

// TestLoad runs the kagenti-netpol binary, built as the Dockerfile builds it, as its own process
// against an envtest API server with the AgentCard CRD (no agentcard controller: the test publishes
// agentcard's status itself, as agentcard writes it, signed A2A card included). It measures, and
// never asserts on time or memory:
//   - idle: the RSS of a first controller process with no AgentCard, KAGENTI_LOAD_SETTLE (20s)
//     after start; that process is then stopped;
//   - N Deployments and N AgentCards targeting them, with agentcard's status (every even card
//     Verified, every odd one not), all created before a second controller process starts → time
//     from its start until every policy exists with the right kind, and until every card reports
//     NetworkPolicyReady (first sync); its API requests per card;
//   - U verdict flips, one at a time (agentcard's Verified condition applied the other way) →
//     latency from the status apply to the policy of the new kind arriving on a watch;
//   - then, converged again, the API writes the controller makes in KAGENTI_LOAD_IDLE (60s), per
//     minute (goal 0), and its RSS (VmRSS, anonymous/file-backed, peak VmHWM) and Go memory;
//   - the controller's own CPU seconds until the first sync converged (independent of the load),
//     and those of envtest's kube-apiserver and etcd over the same time.
//
// The API requests are the controller's own client-go counters (rest_client_requests_total on its
// /metrics), Events included.
//
//	KAGENTI_LOAD=1 KUBEBUILDER_ASSETS=$PWD/bin go test -count=1 -run TestLoad -v -timeout 60m ./netpol/cmd/kagenti-netpol/
//
// KAGENTI_LOAD_N and KAGENTI_LOAD_UPDATES override 1000 and 200; KAGENTI_LOAD_ARGS adds flags
// (e.g. "--max-concurrent-reconciles=4"), KAGENTI_LOAD_ENV environment (e.g. "GOMEMLIMIT=32MiB");
// KAGENTI_LOAD_MEMORY_MAX (e.g. 256Mi) runs the controller in a memory cgroup with that limit
// (ducktest.StartController; root and a writable cgroup needed);
// KAGENTI_LOAD_PROFILE names a file for the controller's heap profile at the end,
// KAGENTI_LOAD_CPUPROFILE one for its CPU profile of the first KAGENTI_LOAD_CPU_SECONDS
// (20) of the first sync.
func TestLoad(t *testing.T) {
	if os.Getenv("KAGENTI_LOAD") != "1" {
		t.Skip("load test: set KAGENTI_LOAD=1")
	}
	n, updates := ducktest.EnvInt("KAGENTI_LOAD_N", 1000), ducktest.EnvInt("KAGENTI_LOAD_UPDATES", 200)
	settle, idle := ducktest.EnvDuration("KAGENTI_LOAD_SETTLE", 20*time.Second), ducktest.EnvDuration("KAGENTI_LOAD_IDLE", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := ducktest.RepoRoot()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Setenv("KUBEBUILDER_ASSETS", filepath.Join(root, "bin"))
	}
	t.Logf("load average at start: %s", ducktest.Loadavg())
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard))) // the test's own caches; the controller logs to stderr

	env := &envtest.Environment{
		CRDDirectoryPaths:        []string{filepath.Join(root, "deploy", "crds", "agentcard")},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	server := controlPlane(t)
	user, err := env.AddUser(envtest.User{Name: "kagenti-netpol", Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	kubeconfig, err := user.KubeConfig()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600))

	scheme := k8sruntime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	for _, ns := range []string{"kagenti-system", "kube-system", "load"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			require.True(t, strings.Contains(err.Error(), "already exists"), err)
		}
	}
	const ns = "load"

	bin := ducktest.BuildBinary(t, dir, "kagenti-netpol")
	ctl := controllerProcess{bin: bin, kubeconfig: filepath.Join(dir, "kubeconfig")}

	idleProc := ctl.start(t)
	time.Sleep(settle)
	t.Logf("LOAD idle (no AgentCard, %v after start): RSS %.1f MiB (anonymous %.1f, file-backed %.1f); load average %s",
		settle, ducktest.ProcStatus(idleProc.pid, "VmRSS"), ducktest.ProcStatus(idleProc.pid, "RssAnon"), ducktest.ProcStatus(idleProc.pid, "RssFile"), ducktest.Loadavg())
	idleProc.stop()
	if n == 0 {
		return
	}

	signedCard := readSignedCard(t, root)
	start := time.Now()
	ducktest.Parallel(t, n, 16, func(i int) error {
		name := workloadName(i)
		if err := c.Create(ctx, deployment(ns, name)); err != nil {
			return err
		}
		card := view.NewAgentCard()
		card.SetNamespace(ns)
		card.SetName(name + "-card")
		card.Object["spec"] = map[string]any{"targetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": name}}
		if err := c.Create(ctx, card); err != nil {
			return err
		}
		return publishVerdict(ctx, c, card, i%2 == 0, signedCard)
	})
	t.Logf("LOAD n=%d: %d Deployments and AgentCards with agentcard's status created in %v, before the controller starts; load average %s",
		n, n, time.Since(start).Round(time.Millisecond), ducktest.Loadavg())

	w := watchCluster(ctx, t, cfg, scheme, ns)
	verified := make([]bool, n)
	for i := range verified {
		verified[i] = i%2 == 0
	}

	serverBefore := server.CPUSeconds()
	proc := ctl.start(t)
	cpuProfileWritten := ducktest.StartCPUProfile(t, proc.pprofAddr)
	waitConverged(ctx, t, w, verified, proc.started, 90*time.Minute, "first sync", proc.exited)
	serverAfter := server.CPUSeconds()
	t.Logf("LOAD API server CPU time from the controller's start until converged (the test's own watch and 1 s polls included): kube-apiserver %.2f s, etcd %.2f s",
		serverAfter[0]-serverBefore[0], serverAfter[1]-serverBefore[1])
	rssConverged := [3]float64{ducktest.ProcStatus(proc.pid, "VmRSS"), ducktest.ProcStatus(proc.pid, "RssAnon"), ducktest.ProcStatus(proc.pid, "RssFile")}
	t.Logf("LOAD controller CPU time until converged (user+system from /proc, start included): %.2f s", ducktest.CPUSeconds(proc.pid))
	firstSync := ducktest.MustRequests(t, proc.metricsAddr)
	t.Logf("LOAD API requests per AgentCard in the first sync (the process's start included): %s", firstSync.PerObject(n))
	cpuProfileWritten()

	lat := make([]time.Duration, 0, updates)
	for u := range updates {
		i := (u * 7919) % n
		verified[i] = !verified[i]
		card := view.NewAgentCard()
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: workloadName(i) + "-card"}, card))
		want := resources.KindFor(view.Verification{Verified: verified[i]})
		t0 := time.Now()
		require.NoError(t, publishVerdict(ctx, c, card, verified[i], signedCard))
		require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
			at, ok := w.policyKindSince(configmap.AgentPolicyName(workloadName(i)), want, t0)
			if ok {
				lat = append(lat, at.Sub(t0))
			}
			return ok, nil
		}), "flip %d of card %d never made its policy %s", u, i, want)
	}
	if len(lat) > 0 {
		waitConverged(ctx, t, w, verified, time.Now(), 30*time.Minute, "after the flips", proc.exited)
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		pct := func(p float64) time.Duration { return lat[int(float64(len(lat)-1)*p)].Round(time.Millisecond / 10) }
		t.Logf("LOAD %d verdict flips: agentcard's status apply → policy of the new kind on a watch p50=%v p90=%v p99=%v max=%v; load average %s",
			len(lat), pct(0.50), pct(0.90), pct(0.99), pct(1), ducktest.Loadavg())
	}

	idleStart := ducktest.MustRequests(t, proc.metricsAddr)
	time.Sleep(idle)
	idleReqs := ducktest.MustRequests(t, proc.metricsAddr).Sub(idleStart)
	t.Logf("LOAD idle with %d converged AgentCards: %.1f API writes per minute (%s in %v)", n, idleReqs.Writes()/idle.Minutes(), idleReqs, idle)
	t.Logf("LOAD controller RSS: %.1f MiB when converged (anonymous %.1f, file-backed %.1f), %.1f MiB at end (anonymous %.1f, file-backed %.1f), peak %.1f MiB",
		rssConverged[0], rssConverged[1], rssConverged[2], ducktest.ProcStatus(proc.pid, "VmRSS"), ducktest.ProcStatus(proc.pid, "RssAnon"),
		ducktest.ProcStatus(proc.pid, "RssFile"), ducktest.ProcStatus(proc.pid, "VmHWM"))
	mem := ducktest.GoMemStats(t, proc.metricsAddr)
	t.Logf("LOAD controller Go memory at end: heap in use %.1f MiB, heap released %.1f MiB, next GC at %.1f MiB, stacks %.1f MiB, runtime total (sys) %.1f MiB",
		mem["heap_inuse"], mem["heap_released"], mem["next_gc"], mem["stack_inuse"], mem["sys"])
	ducktest.SaveHeapProfile(t, proc.pprofAddr)
	t.Logf("load average at end: %s", ducktest.Loadavg())
}

// controllerProcess starts kagenti-netpol processes with the test's flags.
type controllerProcess struct{ bin, kubeconfig string }

type runningController struct {
	pid                    int
	metricsAddr, pprofAddr string
	started                time.Time
	stop                   func()
	// exited is nil while the controller runs, else what ended it (an OOM kill in its cgroup).
	exited func() error
}

// start runs the controller until the test ends (or stop is called) and waits for its metrics.
func (p controllerProcess) start(t *testing.T) runningController {
	t.Helper()
	r := runningController{metricsAddr: fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t)), pprofAddr: fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t))}
	extra := strings.Fields(os.Getenv("KAGENTI_LOAD_ARGS"))
	args := append([]string{"--kubeconfig", p.kubeconfig, "--metrics-bind-address", r.metricsAddr, "--metrics-secure=false",
		"--pprof-bind-address", r.pprofAddr, "--health-probe-bind-address", "0", "--zap-log-level=error"}, extra...)
	cmd := exec.Command(p.bin, args...)
	cmd.Env = append(os.Environ(), strings.Fields(os.Getenv("KAGENTI_LOAD_ENV"))...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	r.started = time.Now()
	ctl := ducktest.StartController(t, cmd)
	r.stop, r.exited, r.pid = ctl.Stop, ctl.Exited, ctl.Pid
	t.Logf("controller: pid %d, %s %s", r.pid, os.Getenv("KAGENTI_LOAD_ENV"), strings.Join(extra, " "))
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := ducktest.APIRequests(r.metricsAddr)
		return err == nil, nil
	}), "the controller's metrics endpoint never answered")
	return r
}

func workloadName(i int) string { return fmt.Sprintf("agent-%d", i) }

func deployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "registry.example/agent:1.0",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}}}}},
			},
		},
	}
}

// readSignedCard is the A2A sample card agentcard's tests parse, with a signature: what agentcard
// copies into status.card, so that the cached AgentCards are the size they are in a cluster.
func readSignedCard(t *testing.T, root string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "agentcard", "internal", "card", "testdata", "spec-v0.3.0-sample.json"))
	require.NoError(t, err)
	card := map[string]any{}
	require.NoError(t, json.Unmarshal(b, &card))
	return card
}

// publishVerdict applies agentcard's status to card as agentcard writes it (server-side apply, field
// manager kagenti-agentcard): its conditions, the Verified verdict for the card's generation, one
// pod entry, the fetched card, its hash, signature and binding results.
func publishVerdict(ctx context.Context, c client.Client, card *unstructured.Unstructured, verified bool, signedCard map[string]any) error {
	status, reason, message := "True", "Verified", "signature by spiffe://cluster.local/ns/load/sa/"+card.GetName()+" verified"
	if !verified {
		status, reason, message = "False", "IdentityNotAllowed", "the signer spiffe://cluster.local/ns/other/sa/x is not this workload's identity"
	}
	gen := card.GetGeneration()
	cond := func(t, s, r, m string) any {
		return map[string]any{"type": t, "status": s, "reason": r, "message": m, "observedGeneration": gen, "lastTransitionTime": "2026-01-01T00:00:00Z"}
	}
	hash := strings.Repeat("c0", 32)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": view.GroupVersion.String(), "kind": "AgentCard",
		"metadata": map[string]any{"name": card.GetName(), "namespace": card.GetNamespace()},
		"status": map[string]any{
			"observedGeneration": gen,
			"conditions": []any{
				cond("Ready", "True", "CardAvailable", "card available from 1 of 1 pods"),
				cond("Synced", "True", "Synced", "fetched from 1 pod"),
				cond("SignatureVerified", status, reason, message),
				cond("Bound", status, reason, message),
				cond(view.ConditionVerified, status, reason, message),
				cond("CardConsistent", "True", "Consistent", "every pod serves the same card"),
			},
			"phase": "Active", "lastSyncTime": "2026-01-01T00:00:00Z", "discoveredPods": int64(1), "syncErrors": int64(0),
			"cards": []any{map[string]any{"podName": card.GetName() + "-7d9c6b5f4-x2x7q", "podIP": "10.244.0.17",
				"url": "http://10.244.0.17:8000/.well-known/agent-card.json", "lastFetchTime": "2026-01-01T00:00:00Z",
				"fetchStatus": "Success", "cardHash": hash}},
			"card": signedCard, "cardHash": hash,
			"signature": map[string]any{"verified": verified, "keyID": "key-1", "spiffeID": "spiffe://cluster.local/ns/load/sa/agent", "algorithm": "ES256"},
			"binding":   map[string]any{"bound": verified, "expectedSpiffeID": "spiffe://cluster.local/ns/load/sa/agent"},
		},
	}}
	return c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("kagenti-agentcard"), client.ForceOwnership)
}

// clusterWatch is the test's informer cache of the load namespace's AgentCards and policies, so
// that convergence is counted without listing 10,000 objects from the API server every second,
// and policy changes are timed when they arrive.
type clusterWatch struct {
	cache cache.Cache
	ns    string
	mu    sync.Mutex
	// kindAt is when each policy was last seen with its current kind annotation.
	kindAt map[string]kindSeen
	// readyAt is when each card was last seen with its current NetworkPolicyReady (status and
	// reason, "" while it has none): the exact arrival times the 1 s polls round up.
	readyAt map[string]kindSeen
}

type kindSeen struct {
	kind string
	at   time.Time
}

func watchCluster(ctx context.Context, t *testing.T, cfg *rest.Config, scheme *k8sruntime.Scheme, ns string) *clusterWatch {
	t.Helper()
	cc, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	require.NoError(t, err)
	w := &clusterWatch{cache: cc, ns: ns, kindAt: map[string]kindSeen{}, readyAt: map[string]kindSeen{}}
	inf, err := cc.GetInformer(ctx, &networkingv1.NetworkPolicy{})
	require.NoError(t, err)
	record := func(obj any) {
		np, ok := obj.(*networkingv1.NetworkPolicy)
		if !ok {
			return
		}
		kind := np.Annotations[resources.PolicyKindAnnotation]
		w.mu.Lock()
		if w.kindAt[np.Name].kind != kind {
			w.kindAt[np.Name] = kindSeen{kind: kind, at: time.Now()}
		}
		w.mu.Unlock()
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }})
	require.NoError(t, err)
	cards, err := cc.GetInformer(ctx, view.NewAgentCard())
	require.NoError(t, err)
	recordCard := func(obj any) {
		card, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		ready := readyCondition(card)
		w.mu.Lock()
		if w.readyAt[card.GetName()].kind != ready {
			w.readyAt[card.GetName()] = kindSeen{kind: ready, at: time.Now()}
		}
		w.mu.Unlock()
	}
	_, err = cards.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: recordCard, UpdateFunc: func(_, obj any) { recordCard(obj) }})
	require.NoError(t, err)
	go func() { _ = cc.Start(ctx) }()
	require.True(t, cc.WaitForCacheSync(ctx))
	return w
}

// policyKindSince reports when the policy took kind, if it has it and took it after since.
func (w *clusterWatch) policyKindSince(name, kind string, since time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.kindAt[name]
	return s.at, s.kind == kind && s.at.After(since)
}

// waitConverged waits until every card's policy has the kind its verdict asks for, then until
// every card reports NetworkPolicyReady=True with the matching reason; it logs both times from start.
func waitConverged(ctx context.Context, t *testing.T, w *clusterWatch, verified []bool, start time.Time, timeout time.Duration, what string, exited func() error) {
	t.Helper()
	last := ""
	// Polled once a second from the test's cache: cheap for the API server and the controller.
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(context.Context) (bool, error) {
		if err := exited(); err != nil {
			return false, err
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		right := 0
		for i, v := range verified {
			if w.kindAt[configmap.AgentPolicyName(workloadName(i))].kind == resources.KindFor(view.Verification{Verified: v}) {
				right++
			}
		}
		last = fmt.Sprintf("%d of %d policies of the right kind", right, len(verified))
		return right == len(verified), nil
	})
	require.NoError(t, err, "%s: %s", what, last)
	policies := time.Since(start)
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if err := exited(); err != nil {
			return false, err
		}
		list := view.NewAgentCardList()
		if err := w.cache.List(ctx, list, client.InNamespace(w.ns), client.UnsafeDisableDeepCopy); err != nil {
			return false, err
		}
		reported := 0
		for _, card := range list.Items {
			i := 0
			if _, err := fmt.Sscanf(card.GetName(), "agent-%d-card", &i); err != nil || i >= len(verified) {
				continue
			}
			want := map[bool]string{true: api.ReasonPermissive, false: api.ReasonRestrictive}[verified[i]]
			if readyCondition(&card) == "True/"+want {
				reported++
			}
		}
		last = fmt.Sprintf("%d of %d cards report NetworkPolicyReady", reported, len(verified))
		return reported == len(verified), nil
	})
	require.NoError(t, err, "%s: %s", what, last)
	conditions := time.Since(start)
	// The polls above see convergence up to a second late; the watch's arrival times are exact.
	var lastPolicy, lastCondition time.Time
	w.mu.Lock()
	for i := range verified {
		if at := w.kindAt[configmap.AgentPolicyName(workloadName(i))].at; at.After(lastPolicy) {
			lastPolicy = at
		}
		if at := w.readyAt[workloadName(i)+"-card"].at; at.After(lastCondition) {
			lastCondition = at
		}
	}
	w.mu.Unlock()
	t.Logf("LOAD %s, n=%d: every policy of the right kind after %v, every NetworkPolicyReady condition after %v (1 s polls); the last of them arrived on the test's watch after %v and %v; load average %s",
		what, len(verified), policies.Round(time.Millisecond), conditions.Round(time.Millisecond),
		max(0, lastPolicy.Sub(start)).Round(time.Millisecond), max(0, lastCondition.Sub(start)).Round(time.Millisecond), ducktest.Loadavg())
}

// readyCondition is a card's NetworkPolicyReady as "status/reason", "" when it has none, read
// without decoding the whole status.
func readyCondition(u *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "conditions")
	list, _ := conds.([]any)
	for _, c := range list {
		if m, ok := c.(map[string]any); ok && m["type"] == api.ConditionNetworkPolicyReady {
			return fmt.Sprint(m["status"], "/", m["reason"])
		}
	}
	return ""
}
