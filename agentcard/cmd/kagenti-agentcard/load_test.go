package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/signature"
	"github.com/kagenti/platform/agentcard/internal/testcards"
	"github.com/kagenti/platform/pkg/duck/ducktest"
)

// loadCardPort is where the test serves every pod's card (on the pod's loopback IP).
const loadCardPort = 18482

// TestLoad runs the kagenti-agentcard binary, built as the Dockerfile builds it and with its default
// settings (discovery API included), as its own process against an envtest API server, and
// measures:
//   - its idle RSS: a first process with no AgentCard, KAGENTI_LOAD_SETTLE (20s) after start;
//   - the first full sync: N AgentCards (selector mode, default sync period) × P ready pods, each
//     pod's card served on its own loopback IP by this test, all created before a second process
//     starts; time from its start until every AgentCard is Ready and Synced with P pod entries,
//     its API requests per AgentCard (client-go's counters, Events included) and its RSS then;
//   - U endpoint updates, one at a time: the time from the update call until the AgentCard's
//     status, seen on a watch, has every pod's entry fetched from the new path;
//   - once converged, after one sync period: API writes per minute over KAGENTI_LOAD_IDLE (60s;
//     goal 0) and the card fetches per second the pods answer.
//
// It reports, never asserts on time or memory.
//
//	KAGENTI_LOAD=1 KUBEBUILDER_ASSETS=$PWD/bin go test -count=1 -run TestLoad -v -timeout 60m ./agentcard/cmd/kagenti-agentcard/
//
// KAGENTI_LOAD_N, KAGENTI_LOAD_PODS and KAGENTI_LOAD_UPDATES override 1000, 3 and 200;
// KAGENTI_LOAD_SIGNED=1 serves cards signed by the pods' identity under a trust bundle the
// controller is given (every pod verified and labelled true; by default the cards are unsigned:
// nothing to verify, no label);
// KAGENTI_LOAD_ARGS adds flags, KAGENTI_LOAD_ENV environment (e.g. "GOMEMLIMIT=50MiB"),
// KAGENTI_LOAD_MEMORY_MAX (e.g. 256Mi) runs the controller in a memory cgroup with that limit
// (ducktest.StartController; root and a writable cgroup needed),
// KAGENTI_LOAD_PROFILE saves the converged controller's heap profile.
func TestLoad(t *testing.T) {
	if os.Getenv("KAGENTI_LOAD") != "1" {
		t.Skip("load test: set KAGENTI_LOAD=1")
	}
	n, podsPer, updates := ducktest.EnvInt("KAGENTI_LOAD_N", 1000), ducktest.EnvInt("KAGENTI_LOAD_PODS", 3), ducktest.EnvInt("KAGENTI_LOAD_UPDATES", 200)
	settle, idle := ducktest.EnvDuration("KAGENTI_LOAD_SETTLE", 20*time.Second), ducktest.EnvDuration("KAGENTI_LOAD_IDLE", time.Minute)
	ctx := context.Background()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Setenv("KUBEBUILDER_ASSETS", filepath.Join(root, "bin"))
	}

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "deploy", "crds", "agentcard")},
		ErrorIfCRDPathMissing: true,
		// The machines running this are shared; give the API server time to come up.
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "kagenti-agentcard", Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	kubeconfig, err := user.KubeConfig()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600))

	scheme := k8sruntime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	// What the deployment provides for the discovery API's certificate rotator.
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kagenti-system"}}))
	require.NoError(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kagenti-system", Name: "kagenti-agentcard-discovery-cert"}, Type: corev1.SecretTypeOpaque}))

	signer := loadSigner(ctx, t, c)

	bin := ducktest.BuildBinary(t, dir, "kagenti-agentcard")

	idleCtl := startController(t, bin, dir)
	time.Sleep(settle)
	t.Logf("LOAD idle (no AgentCard, %v after start): RSS %.1f MiB (anonymous %.1f, file-backed %.1f); load average %s",
		settle, ducktest.ProcStatus(idleCtl.pid, "VmRSS"), ducktest.ProcStatus(idleCtl.pid, "RssAnon"), ducktest.ProcStatus(idleCtl.pid, "RssFile"), ducktest.Loadavg())
	idleCtl.stop()

	// The pods' card servers: the card at the well-known path, and at /upd/<marker> a card whose
	// version is the marker (the updates point spec.endpoint.path there).
	var fetches atomic.Int64
	var cards sync.Map // path → *servedCard
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		version := "1.0.0"
		if marker, ok := strings.CutPrefix(r.URL.Path, "/upd/"); ok {
			version = marker
		}
		sc, ok := cards.Load(version)
		if !ok {
			sc, _ = cards.LoadOrStore(version, newServedCard(t, version, signer))
		}
		card := sc.(*servedCard)
		w.Header().Set("ETag", card.etag)
		if r.Header.Get("If-None-Match") == card.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write(card.body)
	})
	ip := func(i int) string { return fmt.Sprintf("127.46.%d.%d", i/250, i%250+1) }
	for i := range n * podsPer {
		ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", ip(i), loadCardPort))
		require.NoError(t, err, "binding a loopback pod IP (Linux routes all of 127.0.0.0/8 to lo)")
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
	}

	ns := "load"
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	start := time.Now()
	ducktest.Parallel(t, n, 16, func(i int) error {
		labels := map[string]string{"app": fmt.Sprintf("agent-%d", i)}
		for p := range podsPer {
			if err := createReadyPod(ctx, c, ns, fmt.Sprintf("agent-%d-%d", i, p), ip(i*podsPer+p), labels); err != nil {
				return err
			}
		}
		return c.Create(ctx, &v1alpha1.AgentCard{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("agent-%d", i)},
			Spec:       v1alpha1.AgentCardSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}},
		})
	})
	t.Logf("LOAD created %d ready pods and %d AgentCards in %v (before the controller started); load average %s",
		n*podsPer, n, time.Since(start).Round(time.Millisecond), ducktest.Loadavg())

	// Followed on a watch from the test's own cache: polling the API server with a LIST of every
	// AgentCard (and every pod) once a second cost it CPU the sync under test needed, and rounded
	// the result up to the next poll.
	sw := watchSync(ctx, t, cfg, scheme, ns, n, podsPer, signer != nil)
	server := ducktest.FindControlPlane(t)
	serverStart := server.CPUSeconds()
	ctl := startController(t, bin, dir)
	t.Cleanup(ctl.stop)
	cpuProfileWritten := ducktest.StartCPUProfile(t, ctl.pprofAddr)
	statusesDone, firstSync := sw.await(ctx, t, ctl.started, ctl.ctl.Exited)
	if signer != nil {
		t.Logf("LOAD every pod labelled %s=true %v after the controller started (the last status %v after)",
			v1alpha1.LabelSignatureVerified, firstSync.Round(time.Millisecond), statusesDone.Round(time.Millisecond))
	}
	cpuSynced := ducktest.CPUSeconds(ctl.pid)
	serverSynced := server.CPUSeconds()
	rssSynced := [3]float64{ducktest.ProcStatus(ctl.pid, "VmRSS"), ducktest.ProcStatus(ctl.pid, "RssAnon"), ducktest.ProcStatus(ctl.pid, "RssFile")}
	memSynced := ducktest.GoMemStats(t, ctl.metricsAddr)
	synced := ducktest.MustRequests(t, ctl.metricsAddr) // since the process started
	t.Logf("LOAD n=%d AgentCards × %d pods: first full sync (every AgentCard Ready, Synced, %d entries%s) %v after the controller started (the last arrival on the test's watch); load average %s",
		n, podsPer, podsPer, map[bool]string{true: ", Verified, every pod labelled true"}[signer != nil], firstSync.Round(time.Millisecond), ducktest.Loadavg())
	t.Logf("LOAD pods by %s: %s", v1alpha1.LabelSignatureVerified, verifiedLabelCounts(ctx, t, c, ns))
	t.Logf("LOAD controller CPU for the first sync (user+system, load-independent): %.2f s", cpuSynced)
	t.Logf("LOAD API server CPU from the controller's start until synced (the test's own watch included): kube-apiserver %.2f s, etcd %.2f s",
		serverSynced[0]-serverStart[0], serverSynced[1]-serverStart[1])
	t.Logf("LOAD API requests per AgentCard for the first sync: %s", synced.PerObject(n))
	cpuProfileWritten()
	t.Logf("LOAD controller RSS when synced: %.1f MiB (anonymous %.1f, file-backed %.1f); Go heap in use %.1f MiB; live heap %.1f MiB (after a forced GC)",
		rssSynced[0], rssSynced[1], rssSynced[2], memSynced["heap_inuse"], liveHeap(t, ctl))

	lat := updateLatencies(ctx, t, c, ns, n, podsPer, updates)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[int(float64(len(lat)-1)*p)].Round(time.Millisecond / 10) }
	t.Logf("LOAD %d endpoint updates: update → every pod entry fetched from the new path, p50=%v p90=%v p99=%v max=%v; load average %s",
		len(lat), pct(0.50), pct(0.90), pct(0.99), pct(1), ducktest.Loadavg())

	// One sync period (30 s, +10% jitter) for the updated cards' first periodic sync, then idle.
	time.Sleep(35 * time.Second)
	idleStart, fetchStart := ducktest.MustRequests(t, ctl.metricsAddr), fetches.Load()
	time.Sleep(idle)
	idleReqs := ducktest.MustRequests(t, ctl.metricsAddr).Sub(idleStart)
	t.Logf("LOAD idle with %d synced AgentCards: %.1f API writes per minute (%s in %v), %.1f card fetches/s",
		n, idleReqs.Writes()/idle.Minutes(), idleReqs, idle, float64(fetches.Load()-fetchStart)/idle.Seconds())
	memEnd := ducktest.GoMemStats(t, ctl.metricsAddr)
	t.Logf("LOAD controller RSS at end: %.1f MiB (anonymous %.1f, file-backed %.1f), peak %.1f MiB; Go heap in use %.1f MiB, next GC at %.1f MiB, stacks %.1f MiB",
		ducktest.ProcStatus(ctl.pid, "VmRSS"), ducktest.ProcStatus(ctl.pid, "RssAnon"), ducktest.ProcStatus(ctl.pid, "RssFile"), ducktest.ProcStatus(ctl.pid, "VmHWM"),
		memEnd["heap_inuse"], memEnd["next_gc"], memEnd["stack_inuse"])
	ducktest.SaveHeapProfile(t, ctl.pprofAddr)
	t.Logf("load average at end: %s", ducktest.Loadavg())
}

// controllerProcess is one run of the binary.
type controllerProcess struct {
	ctl                    *ducktest.Controller
	pid                    int
	started                time.Time
	metricsAddr, pprofAddr string
}

// startController starts the binary with its default settings (plain-HTTP metrics and pprof on
// loopback for the test, errors-only logs) and waits for its metrics endpoint.
func startController(t *testing.T, bin, dir string) *controllerProcess {
	t.Helper()
	p := &controllerProcess{
		metricsAddr: fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t)),
		pprofAddr:   fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t)),
	}
	args := []string{"--metrics-bind-address", p.metricsAddr, "--metrics-secure=false", "--pprof-bind-address", p.pprofAddr,
		"--health-probe-bind-address", "0", "--zap-log-level=error",
		"--discovery-bind-address", fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t)), "--discovery-rotator-cert-dir", t.TempDir()}
	args = append(args, strings.Fields(os.Getenv("KAGENTI_LOAD_ARGS"))...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(dir, "kubeconfig"))
	cmd.Env = append(cmd.Env, strings.Fields(os.Getenv("KAGENTI_LOAD_ENV"))...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	p.ctl = ducktest.StartController(t, cmd)
	p.started, p.pid = time.Now(), p.ctl.Pid
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := ducktest.APIRequests(p.metricsAddr)
		return err == nil, nil
	}), "the controller's metrics endpoint never answered")
	t.Logf("controller: pid %d, %s %s", p.pid, os.Getenv("KAGENTI_LOAD_ENV"), os.Getenv("KAGENTI_LOAD_ARGS"))
	return p
}

func (p *controllerProcess) stop() {
	p.ctl.Stop()
}

// liveHeap forces a GC in the controller (its pprof heap endpoint with gc=1) and returns the
// bytes then allocated, in MiB: the live heap, which the heap-in-use gauges overstate by whatever
// garbage the next GC has not collected yet.
func liveHeap(t *testing.T, ctl *controllerProcess) float64 {
	resp, err := http.Get("http://" + ctl.pprofAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Logf("heap: %v", err)
		return -1
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return ducktest.GoMemStats(t, ctl.metricsAddr)["heap_alloc"]
}

// loadTrustBundle is the ConfigMap (in kagenti-system) the controller reads its trust bundle from
// when KAGENTI_LOAD_SIGNED=1.
const loadTrustBundle = "load-trust-bundle"

// loadSigner returns, when KAGENTI_LOAD_SIGNED=1, the SVID of the pods' service account in
// namespace "load" ("agent", see createReadyPod) issued by a CA that the ConfigMap loadTrustBundle
// holds, and passes that ConfigMap to the controller; nil otherwise.
func loadSigner(ctx context.Context, t *testing.T, c client.Client) *devca.SVID {
	if os.Getenv("KAGENTI_LOAD_SIGNED") != "1" {
		return nil
	}
	ca, err := devca.NewCA("cluster.local", 24*time.Hour)
	require.NoError(t, err)
	svid, err := ca.NewSVID("spiffe://cluster.local/ns/load/sa/agent", devca.SVIDOptions{NotAfter: time.Now().Add(24 * time.Hour)})
	require.NoError(t, err)
	require.NoError(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kagenti-system", Name: loadTrustBundle},
		Data: map[string]string{"bundle.crt": string(devca.CertPEM(ca.Cert))}}))
	t.Setenv("KAGENTI_LOAD_ARGS", strings.TrimSpace(os.Getenv("KAGENTI_LOAD_ARGS")+" --trust-bundle-configmap=kagenti-system/"+loadTrustBundle))
	t.Logf("LOAD cards signed by %s, trust bundle kagenti-system/%s", svid.Cert.URIs[0], loadTrustBundle)
	return svid
}

// verifiedLabelCounts counts the pods of ns by their kagenti.io/signature-verified label.
func verifiedLabelCounts(ctx context.Context, t *testing.T, c client.Client, ns string) string {
	var pods corev1.PodList
	require.NoError(t, c.List(ctx, &pods, client.InNamespace(ns)))
	count := map[string]int{}
	for _, p := range pods.Items {
		v, ok := p.Labels[v1alpha1.LabelSignatureVerified]
		if !ok {
			v = "<absent>"
		}
		count[v]++
	}
	return fmt.Sprint(count)
}

// createReadyPod creates a pod serving its card on ip:loadCardPort (its "a2a" port), running and
// ready (envtest has no kubelet: the test writes the status).
func createReadyPod(ctx context.Context, c client.Client, ns, name, ip string, labels map[string]string) error {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{ServiceAccountName: "agent", Containers: []corev1.Container{{Name: "agent", Image: "example.com/agent:v1",
			Ports: []corev1.ContainerPort{{Name: "a2a", ContainerPort: loadCardPort}}}}},
	}
	if err := c.Create(ctx, p); err != nil {
		return err
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	return c.Status().Update(ctx, p)
}

// syncWatch follows the load namespace's AgentCards (and, for signed cards, its pods labelled
// verified) in the test's own informers and records when the last card became fully synced and
// when the last pod got its true label.
type syncWatch struct {
	n, pods   int
	signed    bool
	mu        sync.Mutex
	synced    map[string]bool
	labelled  map[string]bool
	cardsDone time.Time
	podsDone  time.Time
}

func watchSync(ctx context.Context, t *testing.T, cfg *rest.Config, scheme *k8sruntime.Scheme, ns string, n, podsPer int, signed bool) *syncWatch {
	t.Helper()
	sw := &syncWatch{n: n, pods: n * podsPer, signed: signed, synced: map[string]bool{}, labelled: map[string]bool{}}
	cc, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}},
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{v1alpha1.LabelSignatureVerified: "true"})}}})
	require.NoError(t, err)
	deleted := func(set map[string]bool, want int, done *time.Time) func(any) {
		return func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if co, ok := o.(client.Object); ok {
				sw.mark(set, co.GetName(), false, want, done)
			}
		}
	}
	cards, err := cc.GetInformer(ctx, &v1alpha1.AgentCard{})
	require.NoError(t, err)
	_, err = cards.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { sw.card(o.(*v1alpha1.AgentCard), podsPer) },
		UpdateFunc: func(_, o any) { sw.card(o.(*v1alpha1.AgentCard), podsPer) },
		DeleteFunc: deleted(sw.synced, sw.n, &sw.cardsDone),
	})
	require.NoError(t, err)
	if signed {
		pods, err := cc.GetInformer(ctx, &corev1.Pod{})
		require.NoError(t, err)
		labelled := func(o any) { sw.mark(sw.labelled, o.(*corev1.Pod).Name, true, sw.pods, &sw.podsDone) }
		_, err = pods.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    labelled,
			UpdateFunc: func(_, o any) { labelled(o) },
			DeleteFunc: deleted(sw.labelled, sw.pods, &sw.podsDone),
		})
		require.NoError(t, err)
	}
	go func() { _ = cc.Start(ctx) }()
	require.True(t, cc.WaitForCacheSync(ctx))
	return sw
}

func (sw *syncWatch) card(ac *v1alpha1.AgentCard, podsPer int) {
	ok := fullySynced(ac, podsPer, "") && (!sw.signed || meta.IsStatusConditionTrue(ac.Status.Conditions, v1alpha1.ConditionVerified))
	sw.mark(sw.synced, ac.Name, ok, sw.n, &sw.cardsDone)
}

// mark records name's state in set and, the first time set holds want names, when that happened.
func (sw *syncWatch) mark(set map[string]bool, name string, ok bool, want int, done *time.Time) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if ok {
		set[name] = true
	} else {
		delete(set, name)
	}
	if len(set) == want && done.IsZero() {
		*done = time.Now()
	}
}

// await waits for the first sync to complete and returns how long after since the last card's
// status arrived, and the last of everything (the pods' labels included).
func (sw *syncWatch) await(ctx context.Context, t *testing.T, since time.Time, exited func() error) (statuses, all time.Duration) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Minute, true, func(context.Context) (bool, error) {
		if err := exited(); err != nil {
			return false, err
		}
		sw.mu.Lock()
		defer sw.mu.Unlock()
		last = fmt.Sprintf("%d of %d AgentCards synced, %d of %d pods labelled true", len(sw.synced), sw.n, len(sw.labelled), sw.pods)
		return !sw.cardsDone.IsZero() && (!sw.signed || !sw.podsDone.IsZero()), nil
	})
	require.NoError(t, err, "the first sync did not complete: %s", last)
	sw.mu.Lock()
	defer sw.mu.Unlock()
	done := sw.cardsDone
	if sw.signed && sw.podsDone.After(done) {
		done = sw.podsDone
	}
	return sw.cardsDone.Sub(since), done.Sub(since)
}

// fullySynced: Ready and Synced for the current generation, with podsPer pod entries, each fetched
// successfully (from a URL ending in urlSuffix).
func fullySynced(c *v1alpha1.AgentCard, podsPer int, urlSuffix string) bool {
	if c.Status.ObservedGeneration != c.Generation || len(c.Status.Cards) != podsPer ||
		!meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionReady) || !meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionSynced) {
		return false
	}
	for _, e := range c.Status.Cards {
		if e.FetchStatus != v1alpha1.FetchSuccess || !strings.HasSuffix(e.URL, urlSuffix) {
			return false
		}
	}
	return true
}

// updateLatencies points spec.endpoint.path of updates AgentCards, one at a time, to a path whose
// card is new, and returns for each the time from the update call until a watch shows the status
// with every pod's entry fetched from that path.
func updateLatencies(ctx context.Context, t *testing.T, c client.WithWatch, ns string, n, podsPer, updates int) []time.Duration {
	w, err := c.Watch(ctx, &v1alpha1.AgentCardList{}, client.InNamespace(ns))
	require.NoError(t, err)
	defer w.Stop()
	var seen ducktest.Arrivals
	go func() {
		for ev := range w.ResultChan() {
			ac, ok := ev.Object.(*v1alpha1.AgentCard)
			if !ok || ev.Type != watch.Modified || ac.Spec.Endpoint == nil {
				continue
			}
			marker := strings.TrimPrefix(ac.Spec.Endpoint.Path, "/upd/")
			if fullySynced(ac, podsPer, "/upd/"+marker) {
				seen.Mark(marker)
			}
		}
	}()
	lat := make([]time.Duration, 0, updates)
	for u := range updates {
		marker := fmt.Sprintf("upd-%d", u)
		ac := &v1alpha1.AgentCard{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("agent-%d", (u*7)%n)}, ac))
		ac.Spec.Endpoint = &v1alpha1.Endpoint{Path: "/upd/" + marker}
		t0 := time.Now()
		require.NoError(t, c.Update(ctx, ac))
		lat = append(lat, seen.Await(ctx, t, marker, t0, "the AgentCard status of update"))
	}
	return lat
}

// servedCard is a card the test's pods serve, with its ETag.
type servedCard struct {
	body []byte
	etag string
}

// newServedCard is the card of version, signed with signer's key when there is one.
func newServedCard(t *testing.T, version string, signer *devca.SVID) *servedCard {
	body := testcards.Weather(version)
	if signer != nil {
		var err error
		body, err = signature.Sign(body, signature.SignOptions{Key: signer.Key, Chain: signer.Chain})
		if err != nil {
			t.Errorf("signing the card: %v", err)
		}
	}
	sum := sha256.Sum256(body)
	return &servedCard{body: body, etag: fmt.Sprintf(`"%x"`, sum[:8])}
}
