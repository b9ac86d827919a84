package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kagenti/platform/netpol/api"
	"github.com/kagenti/platform/netpol/internal/controller"
	"github.com/kagenti/platform/netpol/internal/resources"
	"github.com/kagenti/platform/netpol/internal/view"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/ducktest"
)

// TestWriteCost measures what one write costs the API server: the CPU seconds kube-apiserver and
// etcd (the envtest processes, from /proc/<pid>/stat) spend on N writes of one kind, each to its own
// AgentCard carrying agentcard's status as agentcard writes it (six conditions, the signed A2A
// card; managed by kagenti-agentcard through server-side apply), less what the two processes spend
// idle over the same time. It measures and never asserts on the numbers.
//
//	KAGENTI_WRITECOST=1 KUBEBUILDER_ASSETS=$PWD/bin go test -count=1 -run '^TestWriteCost$' -v ./netpol/cmd/kagenti-netpol/
//
// KAGENTI_WRITECOST_N overrides 500 writes per kind; they are sent by 8 goroutines.
// KAGENTI_WRITECOST_ONLY, a regular expression, runs only the kinds it matches: ssa, metadata,
// small, bare, jsonpatch, mergepatch, update, networkpolicy.
// KAGENTI_WRITECOST_PPROF names a directory: each kind's writes then also get a CPU profile of
// kube-apiserver (its /debug/pprof/profile, KAGENTI_WRITECOST_PPROF_SECONDS, 3, from the burst's
// start: give N enough writes to outlast it), written as <dir>/<kind>.pprof for
// `go tool pprof -top bin/kube-apiserver <file>`; a profiled run's costs include the profiler's.
func TestWriteCost(t *testing.T) {
	if os.Getenv("KAGENTI_WRITECOST") != "1" {
		t.Skip("measurement: set KAGENTI_WRITECOST=1")
	}
	n := ducktest.EnvInt("KAGENTI_WRITECOST_N", 500)
	ctx := context.Background()
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
	cfg.QPS, cfg.Burst = -1, 0
	server := controlPlane(t)
	server.measureIdle()

	plain := k8sruntime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(plain))
	c, err := client.New(cfg, client.Options{Scheme: plain})
	require.NoError(t, err)
	netpolScheme, err := controller.NewScheme()
	require.NoError(t, err)
	nc, err := client.New(cfg, client.Options{Scheme: netpolScheme})
	require.NoError(t, err)
	const ns = "load"
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	signedCard := readSignedCard(t, root)

	// cardsWith makes n AgentCards named <prefix>-<i> with agentcard's status holding a2aCard (no
	// status when nil); not measured.
	cardsWith := func(prefix string, a2aCard map[string]any) []*unstructured.Unstructured {
		out := make([]*unstructured.Unstructured, n)
		ducktest.Parallel(t, n, 16, func(i int) error {
			card := view.NewAgentCard()
			card.SetNamespace(ns)
			card.SetName(fmt.Sprintf("%s-%d", prefix, i))
			card.Object["spec"] = map[string]any{"targetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": card.GetName()}}
			if err := c.Create(ctx, card); err != nil {
				return err
			}
			if a2aCard != nil {
				if err := publishVerdict(ctx, c, card, i%2 == 0, a2aCard); err != nil {
					return err
				}
			}
			out[i] = view.NewAgentCard()
			return c.Get(ctx, client.ObjectKeyFromObject(card), out[i])
		})
		t.Logf("WRITECOST %s cards: %s", prefix, objectSize(t, out[0]))
		return out
	}
	cards := func(prefix string) []*unstructured.Unstructured { return cardsWith(prefix, signedCard) }
	profiles := apiServerProfiler(t, cfg)
	only := regexp.MustCompile(os.Getenv("KAGENTI_WRITECOST_ONLY"))
	wanted := func(kind string) bool { return only.MatchString(kind) }
	measure := func(what string, f func(i int) error) {
		t.Helper()
		m := server.measure(t, func() {
			wait := profiles(what)
			ducktest.Parallel(t, n, 8, f)
			wait()
		})
		t.Logf("WRITECOST %-58s %s; load average %s", what, m.perWrite(n), ducktest.Loadavg())
	}
	ready := func(status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: api.ConditionNetworkPolicyReady, Status: status, Reason: reason,
			Message: "NetworkPolicy agent-0-netpol is permissive: signature verified", LastTransitionTime: metav1.Now()}
	}
	t.Logf("WRITECOST idle: kube-apiserver %.1f ms/s, etcd %.1f ms/s of CPU", server.idle[0]*1000, server.idle[1]*1000)

	// Server-side apply of netpol's condition, as duck.StatusApplier (ConditionsOnly) sends it.
	applier := &duck.StatusApplier{Client: nc, FieldOwner: api.Name, Conditions: []string{api.ConditionNetworkPolicyReady}, ConditionsOnly: true}
	var ssa []*unstructured.Unstructured
	applyReady := func(u *unstructured.Unstructured, status metav1.ConditionStatus, reason string) error {
		current := view.StatusOf(u)
		desired := current.DeepCopyObject().(*view.CardStatus)
		desired.Status.Set(api.ConditionNetworkPolicyReady, status, reason, ready(status, reason).Message)
		return applier.Apply(ctx, current, desired)
	}
	if wanted("ssa") {
		ssa = cards("ssa")
		measure("status SSA, first (no managedFields of netpol yet)", func(i int) error {
			return applyReady(ssa[i], metav1.ConditionTrue, api.ReasonPermissive)
		})
		refresh(t, c, ssa)
		measure("status SSA, changed (netpol's managedFields present)", func(i int) error {
			return applyReady(ssa[i], metav1.ConditionTrue, api.ReasonRestrictive)
		})
	}

	// The same applies with the response asked for as PartialObjectMetadata (what client-go's
	// metadata client asks for): the API server encodes, and the client decodes, the metadata of
	// the card instead of the whole card.
	if wanted("metadata") {
		meta := cards("metadata")
		applyMeta := func(u *unstructured.Unstructured, reason string) error {
			body, err := json.Marshal(map[string]any{"apiVersion": view.GroupVersion.String(), "kind": "AgentCard",
				"metadata": map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()},
				"status":   map[string]any{"conditions": []any{ready(metav1.ConditionTrue, reason)}}})
			if err != nil {
				return err
			}
			m := &metav1.PartialObjectMetadata{}
			m.SetGroupVersionKind(view.AgentCardGVK)
			m.SetNamespace(u.GetNamespace())
			m.SetName(u.GetName())
			return c.Status().Patch(ctx, m, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(api.Name), client.ForceOwnership)
		}
		measure("status SSA, first, response as PartialObjectMetadata", func(i int) error { return applyMeta(meta[i], api.ReasonPermissive) })
		measure("status SSA, changed, response as PartialObjectMetadata", func(i int) error { return applyMeta(meta[i], api.ReasonRestrictive) })
	}

	// The same first apply on cards whose status holds an empty A2A card: what the size of the
	// object costs.
	if wanted("small") {
		small := cardsWith("small", map[string]any{})
		measure("status SSA, first, A2A card empty (object 3.4 KB smaller)", func(i int) error {
			return applyReady(small[i], metav1.ConditionTrue, api.ReasonPermissive)
		})
	}

	// The same first apply on cards without agentcard's status (spec and metadata only): what the
	// CRD's write path costs on its own.
	if wanted("bare") {
		bare := cardsWith("bare", nil)
		measure("status SSA, first, no status from agentcard (bare card)", func(i int) error {
			return applyReady(bare[i], metav1.ConditionTrue, api.ReasonPermissive)
		})
	}

	// JSON patch: append (first) or replace (changed) the one condition, with the card's
	// resourceVersion as the precondition.
	if wanted("jsonpatch") {
		jp := cards("jsonpatch")
		jsonPatch := func(u *unstructured.Unstructured, reason string) error {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			path := "/status/conditions/-"
			for j, cond := range conds {
				if cond.(map[string]any)["type"] == api.ConditionNetworkPolicyReady {
					path = "/status/conditions/" + strconv.Itoa(j)
				}
			}
			op := "add"
			if !strings.HasSuffix(path, "-") {
				op = "replace"
			}
			patch, err := json.Marshal([]map[string]any{
				{"op": "test", "path": "/metadata/resourceVersion", "value": u.GetResourceVersion()},
				{"op": op, "path": path, "value": ready(metav1.ConditionTrue, reason)},
			})
			if err != nil {
				return err
			}
			return c.Status().Patch(ctx, u.DeepCopy(), client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(api.Name))
		}
		measure("status JSON patch, first (test resourceVersion + add)", func(i int) error { return jsonPatch(jp[i], api.ReasonPermissive) })
		refresh(t, c, jp)
		measure("status JSON patch, changed (test resourceVersion + replace)", func(i int) error { return jsonPatch(jp[i], api.ReasonRestrictive) })
	}

	// JSON merge patch of the whole conditions list (a merge patch replaces lists), with the
	// resourceVersion in the patch as the precondition.
	if wanted("mergepatch") {
		mp := cards("mergepatch")
		mergePatch := func(u *unstructured.Unstructured, reason string) error {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			conds = setCondition(conds, ready(metav1.ConditionTrue, reason))
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": u.GetResourceVersion()},
				"status": map[string]any{"conditions": conds}})
			if err != nil {
				return err
			}
			return c.Status().Patch(ctx, u.DeepCopy(), client.RawPatch(types.MergePatchType, patch), client.FieldOwner(api.Name))
		}
		measure("status merge patch, first (all conditions + resourceVersion)", func(i int) error { return mergePatch(mp[i], api.ReasonPermissive) })
		refresh(t, c, mp)
		measure("status merge patch, changed", func(i int) error { return mergePatch(mp[i], api.ReasonRestrictive) })
	}

	// Update (PUT /status) of the whole object read before.
	if wanted("update") {
		up := cards("update")
		update := func(u *unstructured.Unstructured, reason string) error {
			u = u.DeepCopy()
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			if err := unstructured.SetNestedSlice(u.Object, setCondition(conds, ready(metav1.ConditionTrue, reason)), "status", "conditions"); err != nil {
				return err
			}
			return c.Status().Update(ctx, u, client.FieldOwner(api.Name))
		}
		measure("status update (PUT, whole object), first", func(i int) error { return update(up[i], api.ReasonPermissive) })
		refresh(t, c, up)
		measure("status update (PUT, whole object), changed", func(i int) error { return update(up[i], api.ReasonRestrictive) })
	}

	// NetworkPolicies: netpol creates them with Create (kit.ApplyObject); the same policy by
	// server-side apply for comparison.
	if wanted("networkpolicy") {
		owners := ssa
		if owners == nil {
			owners = cards("owner")
		}
		policy := func(u *unstructured.Unstructured, name string) *networkingv1.NetworkPolicy {
			card, err := view.FromUnstructured(u)
			require.NoError(t, err)
			np := resources.MakeNetworkPolicy(card, metav1.LabelSelector{MatchLabels: map[string]string{"app": u.GetName()}}, resources.DefaultOptions())
			np.Name = name
			require.NoError(t, controllerutil.SetControllerReference(u, np, netpolScheme))
			return np
		}
		measure("NetworkPolicy create (POST), as netpol writes it", func(i int) error {
			return c.Create(ctx, policy(owners[i], "create-"+strconv.Itoa(i)), client.FieldOwner(api.Name))
		})
		measure("NetworkPolicy server-side apply (PATCH, new object)", func(i int) error {
			np := policy(owners[i], "apply-"+strconv.Itoa(i))
			np.SetGroupVersionKind(networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"))
			m, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(np)
			if err != nil {
				return err
			}
			return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: m}), client.FieldOwner(api.Name), client.ForceOwnership)
		})
	}
}

// apiServerProfiler returns, when KAGENTI_WRITECOST_PPROF names a directory, a function that starts
// a CPU profile of the API server for one kind of write and returns a wait for it to be saved;
// without the variable, one that does nothing.
func apiServerProfiler(t *testing.T, cfg *rest.Config) func(what string) (wait func()) {
	t.Helper()
	dir := os.Getenv("KAGENTI_WRITECOST_PPROF")
	if dir == "" {
		return func(string) func() { return func() {} }
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	seconds := ducktest.EnvInt("KAGENTI_WRITECOST_PPROF_SECONDS", 3)
	hc, err := rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	unsafe := regexp.MustCompile(`[^A-Za-z0-9]+`)
	return func(what string) func() {
		file := filepath.Join(dir, strings.Trim(unsafe.ReplaceAllString(what, "-"), "-")+".pprof")
		done := make(chan error, 1)
		go func() {
			resp, err := hc.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(cfg.Host, "/"), seconds))
			if err != nil {
				done <- err
				return
			}
			defer func() { _ = resp.Body.Close() }()
			body, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %s", resp.Status, body)
			}
			if err == nil {
				err = os.WriteFile(file, body, 0o644)
			}
			done <- err
		}()
		return func() {
			if err := <-done; err != nil {
				t.Errorf("profile of %q: %v", what, err)
			}
		}
	}
}

// objectSize is the JSON size of a card as stored, and of its managedFields and status.card.
func objectSize(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	size := func(v any) int {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return len(b)
	}
	card, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "card")
	return fmt.Sprintf("object %d B, of which managedFields %d B, status.card %d B",
		size(u.Object), size(u.Object["metadata"].(map[string]any)["managedFields"]), size(card))
}

// setCondition replaces or appends cond in an unstructured conditions list.
func setCondition(conds []any, cond metav1.Condition) []any {
	m, _ := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(&cond)
	out := make([]any, 0, len(conds)+1)
	for _, c := range conds {
		if c.(map[string]any)["type"] != cond.Type {
			out = append(out, c)
		}
	}
	return append(out, m)
}

// refresh reads every card again (its new resourceVersion and conditions); not measured.
func refresh(t *testing.T, c client.Client, list []*unstructured.Unstructured) {
	t.Helper()
	ducktest.Parallel(t, len(list), 16, func(i int) error {
		return c.Get(context.Background(), client.ObjectKeyFromObject(list[i]), list[i])
	})
}

// apiServerProcesses are the envtest kube-apiserver and etcd this test started, and their CPU
// seconds per second when idle.
type apiServerProcesses struct {
	ducktest.ControlPlane
	idle [2]float64
}

// controlPlane finds the kube-apiserver and etcd processes among this test's children (envtest's).
func controlPlane(t *testing.T) *apiServerProcesses {
	t.Helper()
	return &apiServerProcesses{ControlPlane: ducktest.FindControlPlane(t)}
}

// measureIdle measures the two processes' CPU seconds per second over 5 s with no client.
func (p *apiServerProcesses) measureIdle() {
	time.Sleep(2 * time.Second) // past the start-up work
	m := p.raw(func() { time.Sleep(5 * time.Second) })
	p.idle = [2]float64{m.cpu[0] / m.wall.Seconds(), m.cpu[1] / m.wall.Seconds()}
}

type cost struct {
	cpu  [2]float64 // kube-apiserver, etcd CPU seconds
	wall time.Duration
}

func (p *apiServerProcesses) raw(f func()) cost {
	before := p.CPUSeconds()
	start := time.Now()
	f()
	wall := time.Since(start)
	after := p.CPUSeconds()
	return cost{cpu: [2]float64{after[0] - before[0], after[1] - before[1]}, wall: wall}
}

// measure is f's CPU cost to the two processes less their idle rate over f's duration.
func (p *apiServerProcesses) measure(t *testing.T, f func()) cost {
	t.Helper()
	time.Sleep(time.Second) // let the previous phase's trailing work (watch cache, compaction) pass
	m := p.raw(f)
	for i := range m.cpu {
		m.cpu[i] -= p.idle[i] * m.wall.Seconds()
	}
	return m
}

func (m cost) perWrite(n int) string {
	ms := func(s float64) float64 { return s * 1000 / float64(n) }
	return fmt.Sprintf("kube-apiserver %.2f ms + etcd %.2f ms = %.2f ms CPU per write; %.0f writes/s with 8 clients",
		ms(m.cpu[0]), ms(m.cpu[1]), ms(m.cpu[0]+m.cpu[1]), float64(n)/m.wall.Seconds())
}
