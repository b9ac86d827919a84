package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/federation/fedtest"
	"github.com/kagenti/platform/pkg/duck/ducktest"
)

// hubSpiffePath is the path of the hub's SVID that fedtest's members expect.
const hubSpiffePath = "/ns/kagenti-system/sa/kagenti-agentcard-hub"

// memberAPI is an envtest API server holding a member cluster's AgentCards.
type memberAPI struct {
	client     client.Client
	kubeconfig string
}

func startMemberAPI(t *testing.T) memberAPI {
	t.Helper()
	root := ducktest.RepoRoot()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Setenv("KUBEBUILDER_ASSETS", filepath.Join(root, "bin"))
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:        []string{filepath.Join(root, "deploy", "crds", "agentcard")},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "kagenti-agentcard", Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	kc, err := user.KubeConfig()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, kc, 0o600))
	scheme := k8sruntime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	require.NoError(t, c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents"}}))
	return memberAPI{client: c, kubeconfig: path}
}

// publish creates AgentCard agents/name with the status agentcard's controller writes for a
// verified, bound card: what a member agent reads.
func (m memberAPI) publish(t *testing.T, name string, exported bool, card []byte, signer string) {
	t.Helper()
	require.NoError(t, m.publishErr(name, exported, card, signer))
}

func (m memberAPI) publishErr(name string, exported bool, card []byte, signer string) error {
	ctx := context.Background()
	ac := &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: name},
		Spec: v1alpha1.AgentCardSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}}}
	if exported {
		ac.Labels = map[string]string{v1alpha1.LabelExport: "true"}
	}
	if err := m.client.Create(ctx, ac); err != nil {
		return err
	}
	ac.Status.ObservedGeneration = ac.Generation
	ac.Status.Card = &k8sruntime.RawExtension{Raw: card}
	ac.Status.Signature = &v1alpha1.SignatureStatus{Verified: true, SpiffeID: signer}
	ac.Status.Binding = &v1alpha1.BindingStatus{Bound: true, ExpectedSpiffeID: signer}
	meta.SetStatusCondition(&ac.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionVerified, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonVerified, ObservedGeneration: ac.Generation})
	return m.client.Status().Update(ctx, ac)
}

// writeSVID writes an SVID of d for path, and d's bundle, as PEM files in dir.
func writeSVID(t *testing.T, dir string, d *fedtest.Domain, path string) (cert, key, bundle string) {
	t.Helper()
	s, err := d.CA.NewSVID("spiffe://"+d.TD.Name()+path, devca.SVIDOptions{})
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	cert, key, bundle = filepath.Join(dir, "svid.crt"), filepath.Join(dir, "svid.key"), filepath.Join(dir, "bundle.crt")
	require.NoError(t, devca.WriteFiles(cert, key, s.Key, s.Chain...))
	require.NoError(t, os.WriteFile(bundle, d.BundlePEM, 0o600))
	return cert, key, bundle
}

// buildMember builds kagenti-agentcard-federation-member, the member agent alone, as its
// Dockerfile does.
func buildMember(t *testing.T) string {
	return ducktest.BuildPackage(t, t.TempDir(), "kagenti-agentcard-federation-member", "../kagenti-agentcard-federation-member")
}

// startMemberOnly starts kagenti-agentcard-federation-member (bin) against the member API server,
// dialling hubAddr.
func startMemberOnly(t *testing.T, bin string, api memberAPI, name string, d, hubDomain *fedtest.Domain, hubAddr string) (*ducktest.Controller, *lockedBuffer) {
	t.Helper()
	dir := t.TempDir()
	cert, key, _ := writeSVID(t, filepath.Join(dir, "member"), d, fedtest.AgentPath)
	hubBundle := filepath.Join(dir, "hub-bundle.crt")
	require.NoError(t, os.WriteFile(hubBundle, hubDomain.BundlePEM, 0o600))
	cmd := exec.Command(bin, "--kubeconfig", api.kubeconfig, "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--cluster-name="+name, "--federation-hub-address="+hubAddr, "--federation-hub-spiffe-id=spiffe://"+hubDomain.TD.Name()+hubSpiffePath,
		"--federation-cert-file="+cert, "--federation-key-file="+key, "--federation-hub-bundle-file="+hubBundle)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	return ducktest.StartController(t, cmd), out
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestFederationMemberOnly: kagenti-agentcard-federation-member runs the member agent alone, as its
// own process against a real API server: it streams the exported, verified AgentCards to a hub
// (here in this test, over mutual TLS), never an unexported one, and runs no AgentCard controller
// (it writes nothing to the member cluster). That it links neither the controller nor the
// discovery API is TestLinksTheMemberAgentAlone, in its own package.
func TestFederationMemberOnly(t *testing.T) {
	api := startMemberAPI(t)
	hubDomain, a := fedtest.NewDomain(t, "hub.example"), fedtest.NewDomain(t, "a.example")
	h := fedtest.StartHub(t, hubDomain, fedtest.NewHub(clock.RealClock{}, fedtest.Registration("a", a, 30*time.Second, time.Minute)))
	for i := range 3 {
		card, signer := a.SignedCard(t, "agents", "agent", fmt.Sprintf("agent-%d", i), "1.0.0")
		api.publish(t, fmt.Sprintf("agent-%d", i), true, card, signer)
	}
	card, signer := a.SignedCard(t, "agents", "agent", "private", "1.0.0")
	api.publish(t, "private", false, card, signer)
	before := &v1alpha1.AgentCardList{}
	require.NoError(t, api.client.List(context.Background(), before))

	_, log := startMemberOnly(t, buildMember(t), api, "a", a, hubDomain, h.Address)

	deadline := time.Now().Add(time.Minute)
	for len(h.Store.RemoteCards("a", "")) != 3 {
		require.False(t, time.Now().After(deadline), "the hub never served member a's three exported cards; member log:\n%s", log.String())
		time.Sleep(50 * time.Millisecond)
	}
	for _, rc := range h.Store.RemoteCards("a", "") {
		require.NotEqual(t, "private", rc.Name, "an unexported card reached the hub")
	}
	after := &v1alpha1.AgentCardList{}
	require.NoError(t, api.client.List(context.Background(), after))
	for i := range after.Items {
		require.Equal(t, before.Items[i].ResourceVersion, after.Items[i].ResourceVersion,
			"AgentCard %s was written: an AgentCard controller runs in the member agent's process", after.Items[i].Name)
	}

	// The agent caches only the cards labelled for export: one that loses the label leaves its
	// cache as if deleted, and the hub withdraws it; labelled again, it comes back.
	setExport := func(name string, export bool) {
		ac := &v1alpha1.AgentCard{}
		require.NoError(t, api.client.Get(context.Background(), client.ObjectKey{Namespace: "agents", Name: name}, ac))
		if export {
			ac.Labels = map[string]string{v1alpha1.LabelExport: "true"}
		} else {
			delete(ac.Labels, v1alpha1.LabelExport)
		}
		require.NoError(t, api.client.Update(context.Background(), ac))
	}
	served := func(want int, what string) {
		deadline := time.Now().Add(time.Minute)
		for len(h.Store.RemoteCards("a", "")) != want {
			require.False(t, time.Now().After(deadline), "%s: the hub serves %d cards of member a, not %d; member log:\n%s",
				what, len(h.Store.RemoteCards("a", "")), want, log.String())
			time.Sleep(50 * time.Millisecond)
		}
	}
	setExport("agent-0", false)
	served(2, "agent-0 unlabelled")
	setExport("agent-0", true)
	served(3, "agent-0 labelled again")
}

// TestLoadFederation measures the federation's processes at the scale, 10 members × 1,000
// cards, built as the Dockerfile builds them: the hub (kagenti-agentcard --federation=hub, its
// default settings, against an envtest API server with the registrations) and a member
// (kagenti-agentcard-federation-member against a second API server holding 1,000
// exported, verified AgentCards). Ten members are agents in this test process (fedtest) streaming
// 1,000 signed cards each; the member process streams its own 1,000. It reports the time from
// the members' start until the hub's FederatedCluster statuses count every card (the hub writes
// them once a second), and the RSS of both processes. It reports, never asserts on time or memory.
//
//	KAGENTI_LOAD=1 KUBEBUILDER_ASSETS=$PWD/bin go test -count=1 -run TestLoadFederation -v -timeout 30m ./agentcard/cmd/kagenti-agentcard/
//
// KAGENTI_LOAD_N overrides the 1,000 cards per member, KAGENTI_LOAD_MEMBERS the 10 members.
func TestLoadFederation(t *testing.T) {
	if os.Getenv("KAGENTI_LOAD") != "1" {
		t.Skip("load test: set KAGENTI_LOAD=1")
	}
	n, members := ducktest.EnvInt("KAGENTI_LOAD_N", 1000), ducktest.EnvInt("KAGENTI_LOAD_MEMBERS", 10)
	ctx := context.Background()
	bin := ducktest.BuildBinary(t, t.TempDir(), "kagenti-agentcard")

	// The hub's cluster and its registrations: members m0…m{members-1} in this process, "real" the
	// member process.
	hubAPI := startMemberAPI(t)
	require.NoError(t, hubAPI.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kagenti-system"}}))
	require.NoError(t, hubAPI.client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kagenti-system", Name: "kagenti-agentcard-discovery-cert"}, Type: corev1.SecretTypeOpaque}))
	hubDomain := fedtest.NewDomain(t, "hub.example")
	domains := map[string]*fedtest.Domain{"real": fedtest.NewDomain(t, "real.example")}
	for i := range members {
		domains[fmt.Sprintf("m%d", i)] = fedtest.NewDomain(t, fmt.Sprintf("m%d.example", i))
	}
	for name, d := range domains {
		fc := fedtest.Registration(name, d, time.Minute, 5*time.Minute)
		require.NoError(t, hubAPI.client.Create(ctx, &fc))
	}

	dir := t.TempDir()
	hubCert, hubKey, _ := writeSVID(t, filepath.Join(dir, "hub"), hubDomain, hubSpiffePath)
	hubAddr := fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t))
	hubCmd := exec.Command(bin, "--kubeconfig", hubAPI.kubeconfig, "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--zap-log-level=error", "--discovery-bind-address", fmt.Sprintf("127.0.0.1:%d", ducktest.FreePort(t)), "--discovery-rotator-cert-dir", t.TempDir(),
		"--federation=hub", "--cluster-name=hub", "--federation-bind-address="+hubAddr, "--federation-cert-file="+hubCert, "--federation-key-file="+hubKey)
	hubCmd.Stdout, hubCmd.Stderr = os.Stderr, os.Stderr
	hubProc := ducktest.StartController(t, hubCmd)
	time.Sleep(20 * time.Second)
	t.Logf("LOAD hub idle (registrations, no member, 20s after start): RSS %.1f MiB (anonymous %.1f, file-backed %.1f); load average %s",
		ducktest.ProcStatus(hubProc.Pid, "VmRSS"), ducktest.ProcStatus(hubProc.Pid, "RssAnon"), ducktest.ProcStatus(hubProc.Pid, "RssFile"), ducktest.Loadavg())

	// The member process's cluster.
	memberAPI := startMemberAPI(t)
	real := domains["real"]
	cards, signers := make([][]byte, n), make([]string, n)
	for i := range n {
		cards[i], signers[i] = real.SignedCard(t, "agents", "agent", fmt.Sprintf("agent-%d", i), "1.0.0")
	}
	start := time.Now()
	ducktest.Parallel(t, n, 8, func(i int) error {
		return memberAPI.publishErr(fmt.Sprintf("agent-%d", i), true, cards[i], signers[i])
	})
	t.Logf("LOAD %d exported, verified AgentCards created in the member cluster in %.1f s", n, time.Since(start).Seconds())

	// The in-process members' cards, signed before anything connects.
	ms := make([]*fedtest.Member, 0, members)
	for i := range members {
		name := fmt.Sprintf("m%d", i)
		m := fedtest.NewMember(t, name, domains[name], hubDomain, hubAddr)
		for j := range n {
			card, signer := domains[name].SignedCard(t, "agents", "agent", fmt.Sprintf("agent-%d", j), "1.0.0")
			m.Log.Put("agents", fmt.Sprintf("agent-%d", j), card, signer, time.Now())
		}
		ms = append(ms, m)
	}

	start = time.Now()
	memberProc, memberLog := startMemberOnly(t, buildMember(t), memberAPI, "real", real, hubDomain, hubAddr)
	for _, m := range ms {
		m.Run(t)
	}
	counted := func() (int32, string) {
		list := &v1alpha1.FederatedClusterList{}
		if err := hubAPI.client.List(ctx, list); err != nil {
			return 0, err.Error()
		}
		var total int32
		var short []string
		for _, fc := range list.Items {
			total += fc.Status.Cards
			if int(fc.Status.Cards) < n {
				short = append(short, fmt.Sprintf("%s=%d", fc.Name, fc.Status.Cards))
			}
		}
		return total, strings.Join(short, " ")
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		total, short := counted()
		if int(total) == n*(members+1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub counts %d of %d cards after 10 minutes (short: %s); member log:\n%s", total, n*(members+1), short, memberLog.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("LOAD hub first sync: %d members × %d cards counted in the hub's statuses %.1f s after the members started (status written every 1 s)",
		members+1, n, time.Since(start).Seconds())
	time.Sleep(5 * time.Second)
	t.Logf("LOAD hub with %d cards: RSS %.1f MiB (anonymous %.1f, file-backed %.1f); member process with %d cards: RSS %.1f MiB (anonymous %.1f, file-backed %.1f); load average %s",
		n*(members+1), ducktest.ProcStatus(hubProc.Pid, "VmRSS"), ducktest.ProcStatus(hubProc.Pid, "RssAnon"), ducktest.ProcStatus(hubProc.Pid, "RssFile"),
		n, ducktest.ProcStatus(memberProc.Pid, "VmRSS"), ducktest.ProcStatus(memberProc.Pid, "RssAnon"), ducktest.ProcStatus(memberProc.Pid, "RssFile"), ducktest.Loadavg())
}
