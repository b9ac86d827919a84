package duck

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/pkg/duck/ducktest"
)

func TestMarkKeepsTransitionTimeAndPairsConditions(t *testing.T) {
	var s Status
	s.Observe(3)
	s.MarkReconciling("Waiting", "pods are starting")
	require.Len(t, s.Conditions, 2)
	for _, c := range s.Conditions {
		assert.Equal(t, int64(3), c.ObservedGeneration)
	}
	assert.Equal(t, metav1.ConditionTrue, s.Condition(ConditionReconciling).Status)

	s.MarkStalled("InvalidSpec", "bad")
	assert.Nil(t, s.Condition(ConditionReconciling), "Reconciling is present only while True")
	assert.Equal(t, metav1.ConditionTrue, s.Condition(ConditionStalled).Status)
	assert.False(t, s.IsReady())

	s.MarkReady("Configured", "ok")
	assert.Nil(t, s.Condition(ConditionStalled))
	assert.True(t, s.IsReady())
	first := s.Condition(ConditionReady).LastTransitionTime
	first.Time = first.Add(-time.Hour) // as if stored an hour ago
	s.Condition(ConditionReady).LastTransitionTime = first
	s.MarkReady("Configured", "ok, again")
	assert.Equal(t, first, s.Condition(ConditionReady).LastTransitionTime, "same status: lastTransitionTime stays")
	assert.Equal(t, "ok, again", s.Condition(ConditionReady).Message)
}

func TestReferrerInEffect(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Second))
	now := metav1.Now()
	obj := func(name string, created metav1.Time, deleting bool) client.Object {
		g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name), CreationTimestamp: created}}
		if deleting {
			g.DeletionTimestamp = &now
		}
		return g
	}
	a, b, c := obj("a", t1, false), obj("b", t0, false), obj("c", t1, false)
	cases := []struct {
		name      string
		self      client.Object
		referrers []client.Object
		want      string
	}{
		{"alone", a, nil, "a"},
		{"listed with itself only", a, []client.Object{a}, "a"},
		{"older wins", a, []client.Object{a, b}, "b"},
		{"the oldest is self", b, []client.Object{a, b, c}, "b"},
		{"same time: name decides", c, []client.Object{a, c}, "a"},
		{"self missing from a lagging cache but oldest", b, []client.Object{a, c}, "b"},
		{"an older referrer being deleted does not win", a, []client.Object{a, obj("b", t0, true)}, "a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ReferrerInEffect(tc.self, tc.referrers).GetName())
		})
	}
}

// TestStatusVerdicts applies every state of the status model to a real object on the API server
// and checks the verdict of kstatus (Flux, kubectl wait tooling) and of the shipped Argo CD health
// script for it, over one table.
func TestStatusVerdicts(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	ns := namespace(t, c, "status-verdicts")
	rec := &eventLog{}
	a := &StatusApplier{Client: c, FieldOwner: "kagenti-test", Recorder: rec, Conditions: []string{"TargetResolved"}}

	g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns}, Spec: gadgetSpec{Size: 1}}
	require.NoError(t, c.Create(ctx, g))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	assert.Equal(t, int64(0), g.Status.ObservedGeneration)
	assertVerdict(t, c, g, status.InProgressStatus, "Progressing", "right after create, before the controller has seen it")

	states := []struct {
		name  string
		mark  func(*Status)
		kstat status.Status
		argo  string
	}{
		{"reconciling", func(s *Status) { s.MarkReconciling("TargetNotFound", "Deployment web not found") }, status.InProgressStatus, "Progressing"},
		{"ready", func(s *Status) { s.MarkReady("Configured", "all pods configured") }, status.CurrentStatus, "Healthy"},
		{"stalled", func(s *Status) { s.MarkStalled("InvalidSpec", "spec.x: bad") }, status.FailedStatus, "Degraded"},
		{"ready again", func(s *Status) { s.MarkReady("Configured", "all pods configured") }, status.CurrentStatus, "Healthy"},
	}
	for _, st := range states {
		desired := g.DeepCopyObject().(*gadget)
		desired.Status.Observe(desired.Generation)
		st.mark(desired.GetStatus())
		desired.Status.Set("TargetResolved", metav1.ConditionTrue, "Resolved", "Deployment web")
		require.NoError(t, a.Apply(ctx, g, desired), st.name)
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
		assertVerdict(t, c, g, st.kstat, st.argo, st.name)
	}
	assert.Equal(t, []string{
		"Warning TargetNotFound", // first value, not True: an Event
		"Normal Configured",      // became True
		"Warning InvalidSpec",
		"Normal Configured",
	}, rec.lines())

	// A new generation the controller has not observed reads as in progress again.
	g.Spec.Size = 2
	require.NoError(t, c.Update(ctx, g))
	assertVerdict(t, c, g, status.InProgressStatus, "Progressing", "new generation")
}

// With NoFirstValueEvent the summary's first value is no Event, also when it is not True; its
// changes are.
func TestStatusApplierNoFirstValueEvent(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	ns := namespace(t, c, "status-first-value")
	rec := &eventLog{}
	a := &StatusApplier{Client: c, FieldOwner: "kagenti-test", Recorder: rec, NoFirstValueEvent: true}
	g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns}}
	require.NoError(t, c.Create(ctx, g))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	for _, mark := range []func(*Status){
		func(s *Status) { s.MarkReconciling("Building", "run started") },
		func(s *Status) { s.MarkStalled("BuildFailed", "step build failed") },
		func(s *Status) { s.MarkReady("BuildSucceeded", "built") },
	} {
		desired := g.DeepCopyObject().(*gadget)
		desired.Status.Observe(desired.Generation)
		mark(desired.GetStatus())
		require.NoError(t, a.Apply(ctx, g, desired))
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	}
	assert.Equal(t, []string{"Warning BuildFailed", "Normal BuildSucceeded"}, rec.lines(), "the first value, Building, is no Event")
}

func TestStatusApplierWritesOnlyChangesAndOwnedConditions(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	ns := namespace(t, c, "status-apply")
	rec := &eventLog{}
	a := &StatusApplier{Client: c, FieldOwner: "kagenti-test", Recorder: rec}

	g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns}}
	require.NoError(t, c.Create(ctx, g))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))

	// Another controller owns a condition of its own on the same status.
	foreign := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.kagenti.io/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "g", "namespace": ns},
		"status": map[string]any{"conditions": []any{map[string]any{
			"type": "NetworkPolicyReady", "status": "True", "reason": "Applied", "message": "policy",
			"lastTransitionTime": "2026-01-01T00:00:00Z",
		}}},
	}}
	require.NoError(t, c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(foreign), client.FieldOwner("kagenti-netpol")))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))

	desired := g.DeepCopyObject().(*gadget)
	desired.Status.Observe(g.Generation)
	desired.Status.MarkReady("Configured", "ok")
	desired.Status.Phase = "Active"
	require.NoError(t, a.Apply(ctx, g, desired))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	assert.NotNil(t, g.Status.Condition("NetworkPolicyReady"), "another owner's condition survives")
	assert.True(t, g.Status.IsReady())
	assert.Equal(t, "Active", g.Status.Phase)
	assert.Empty(t, rec.lines(), "a Ready condition whose first value is True is no Event")

	// The same verdict again, computed afresh: nothing is written.
	rv := g.ResourceVersion
	again := g.DeepCopyObject().(*gadget)
	again.Status.Observe(g.Generation)
	again.Status.MarkReady("Configured", "ok")
	again.Status.Phase = "Active"
	require.NoError(t, a.Apply(ctx, g, again))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	assert.Equal(t, rv, g.ResourceVersion, "an unchanged status is not written")

	// Dropping an owned condition removes it; the foreign one stays.
	fewer := g.DeepCopyObject().(*gadget)
	fewer.Status.MarkStalled("Conflict", "another Gadget configures web")
	fewer.Status.Remove(ConditionStalled)
	require.NoError(t, a.Apply(ctx, g, fewer))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	assert.Nil(t, g.Status.Condition(ConditionStalled))
	assert.NotNil(t, g.Status.Condition("NetworkPolicyReady"))
	assert.Equal(t, []string{"Warning Conflict"}, rec.lines())
}

// TestStatusApplierRequireCurrentRefusesStaleCopies: a status computed from a copy older than the
// stored object (a cache that has not seen the previous status write) is refused as stale and
// leaves the stored status, and its Ready lastTransitionTime, as they were.
func TestStatusApplierRequireCurrentRefusesStaleCopies(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	ns := namespace(t, c, "status-stale")
	a := &StatusApplier{Client: c, FieldOwner: "kagenti-test", RequireCurrent: true}

	g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns}}
	require.NoError(t, c.Create(ctx, g))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	stale := g.DeepCopyObject().(*gadget) // as a lagging cache still holds it: no status yet

	first := g.DeepCopyObject().(*gadget)
	first.Status.Observe(g.Generation)
	first.Status.MarkReady("Configured", "ok")
	first.Status.Condition(ConditionReady).LastTransitionTime = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, a.Apply(ctx, g, first))

	// The same verdict computed from the stale copy: a fresh lastTransitionTime.
	again := stale.DeepCopyObject().(*gadget)
	again.Status.Observe(stale.Generation)
	again.Status.MarkReady("Configured", "ok")
	err := a.Apply(ctx, stale, again)
	require.Error(t, err)
	assert.True(t, IsStale(err), "want a stale refusal, got %v", err)

	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	assert.Equal(t, first.Status.Condition(ConditionReady).LastTransitionTime.UTC(), g.Status.Condition(ConditionReady).LastTransitionTime.UTC(),
		"the stored Ready keeps the time it became True")

	// From the current copy the same write goes through (nothing to change here: no write at all).
	current := g.DeepCopyObject().(*gadget)
	current.Status.MarkReady("Configured", "ok")
	require.NoError(t, a.Apply(ctx, g, current))
	current.Status.Phase = "Active"
	require.NoError(t, a.Apply(ctx, g, current))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	assert.Equal(t, "Active", g.Status.Phase)
}

// TestStatusApplierConditionsOnly: a second pillar reporting on a resource it does not own
// (netpol on AgentCards) writes its one condition, and never the owner's Ready, observedGeneration or
// other status fields, even from a stale copy; both write without conflicts.
func TestStatusApplierConditionsOnly(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	ns := namespace(t, c, "status-apply-guest")
	ownerEvents, guestEvents := &eventLog{}, &eventLog{}
	owner := &StatusApplier{Client: c, FieldOwner: "kagenti-owner", Recorder: ownerEvents}
	guest := &StatusApplier{Client: c, FieldOwner: "kagenti-guest", Recorder: guestEvents,
		Conditions: []string{"NetworkPolicyReady"}, ConditionsOnly: true}

	g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns}}
	require.NoError(t, c.Create(ctx, g))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	stale := g.DeepCopyObject().(*gadget) // the guest's read, from before the owner's write

	mine := g.DeepCopyObject().(*gadget)
	mine.Status.Observe(g.Generation)
	mine.Status.MarkReady("Configured", "ok")
	mine.Status.Phase = "Active"
	require.NoError(t, owner.Apply(ctx, g, mine))

	theirs := stale.DeepCopyObject().(*gadget)
	theirs.Status.Observe(7) // a guest's generation bookkeeping must not reach the status
	theirs.Status.MarkStalled("Bogus", "the guest does not own Ready")
	theirs.Status.Set("NetworkPolicyReady", metav1.ConditionFalse, "PolicyConflict", "taken")
	require.NoError(t, guest.Apply(ctx, stale, theirs))

	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	assert.True(t, g.Status.IsReady(), "the owner's Ready stands")
	assert.Nil(t, g.Status.Condition(ConditionStalled), "the guest writes no Stalled")
	assert.Equal(t, "Active", g.Status.Phase)
	assert.Equal(t, g.Generation, g.Status.ObservedGeneration)
	require.NotNil(t, g.Status.Condition("NetworkPolicyReady"))
	owned := 0
	for _, f := range g.ManagedFields {
		if f.Manager != "kagenti-guest" {
			continue
		}
		owned++
		var fields map[string]map[string]map[string]any
		require.NoError(t, json.Unmarshal(f.FieldsV1.Raw, &fields))
		assert.Equal(t, []string{"f:conditions"}, slices.Collect(maps.Keys(fields["f:status"])), "the guest owns no other status field")
		assert.Equal(t, []string{`k:{"type":"NetworkPolicyReady"}`}, slices.Collect(maps.Keys(fields["f:status"]["f:conditions"])), "the guest owns only its condition")
	}
	assert.Equal(t, 1, owned, "the guest's apply is recorded under its field owner")
	assert.Equal(t, []string{"Warning PolicyConflict"}, guestEvents.lines(), "Events follow the guest's own condition")
	assert.Empty(t, ownerEvents.lines())

	// The owner's next write (from its own stale read) keeps the guest's condition, and the guest
	// giving its condition up removes only that.
	again := g.DeepCopyObject().(*gadget)
	again.Status.MarkReconciling("Waiting", "pods are starting")
	require.NoError(t, owner.Apply(ctx, g, again))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	require.NotNil(t, g.Status.Condition("NetworkPolicyReady"))
	gone := g.DeepCopyObject().(*gadget)
	gone.Status.Remove("NetworkPolicyReady")
	require.NoError(t, guest.Apply(ctx, g, gone))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(g), g))
	assert.Nil(t, g.Status.Condition("NetworkPolicyReady"))
	assert.NotNil(t, g.Status.Condition(ConditionReconciling))
	assert.Equal(t, "Active", g.Status.Phase)
}

// assertVerdict reads obj back as the tools do (unstructured) and checks both verdicts.
func assertVerdict(t *testing.T, c client.Client, obj client.Object, want status.Status, wantArgo, state string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(testReferrerGV.WithKind("Gadget"))
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(obj), u))
	ducktest.AssertVerdict(t, u, want, wantArgo, state)
}

// TestArgoCDHealthForEveryKind checks that every kind's key in the shipped argocd-cm ConfigMap
// carries the one health script the verdict tests run.
func TestArgoCDHealthForEveryKind(t *testing.T) {
	var kust struct {
		ConfigMapGenerator []struct {
			Files []string `json:"files"`
		} `json:"configMapGenerator"`
	}
	raw, err := os.ReadFile(filepath.Join(ducktest.ArgoCDDir(), "kustomization.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &kust))
	var kinds []string
	for _, f := range kust.ConfigMapGenerator[0].Files {
		key, file, _ := strings.Cut(f, "=")
		require.Equal(t, "health.lua", file)
		kinds = append(kinds, strings.TrimPrefix(key, "resource.customizations.health.kagenti.io_"))
	}
	assert.ElementsMatch(t, []string{"TokenExchange", "AgentTrace", "AgentCard", "AgentBuild"}, kinds)
}

// eventLog is an EventRecorder that keeps "type reason" of every Event.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (e *eventLog) Eventf(_ runtime.Object, _ runtime.Object, eventType, reason, _, _ string, _ ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, eventType+" "+reason)
}

func (e *eventLog) AnnotatedEventf(_ runtime.Object, _ runtime.Object, _ map[string]string, eventType, reason, _, _ string, _ ...any) {
	e.Eventf(nil, nil, eventType, reason, "", "")
}

func (e *eventLog) lines() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.events
	e.events = nil
	return out
}

// TestStatusCompact: decoded from JSON, five conditions sit in a slice with room for eight, each
// with its own copy of the type, status and reason; compacted, the slice holds exactly them and
// the strings are shared, with every value unchanged.
func TestStatusCompact(t *testing.T) {
	conds := `[{"type":"A","status":"True","reason":"Ok","message":"m1","lastTransitionTime":"2026-01-01T00:00:00Z"},` +
		`{"type":"B","status":"True","reason":"Ok","message":"m2","lastTransitionTime":"2026-01-01T00:00:00Z"},` +
		`{"type":"C","status":"False","reason":"No","message":"m3","lastTransitionTime":"2026-01-01T00:00:00Z"},` +
		`{"type":"D","status":"True","reason":"Ok","message":"m4","lastTransitionTime":"2026-01-01T00:00:00Z"},` +
		`{"type":"Ready","status":"True","reason":"Ok","message":"m5","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":3}]`
	var a, b Status
	require.NoError(t, json.Unmarshal([]byte(`{"conditions":`+conds+`}`), &a))
	require.NoError(t, json.Unmarshal([]byte(`{"conditions":`+conds+`}`), &b))
	require.Greater(t, cap(a.Conditions), len(a.Conditions), "the decoder leaves spare room (what Compact removes)")
	want := slices.Clone(a.Conditions)

	a.Compact()
	b.Compact()
	assert.Equal(t, want, a.Conditions)
	assert.Equal(t, len(a.Conditions), cap(a.Conditions))
	assert.Equal(t, unsafe.StringData(a.Conditions[0].Reason), unsafe.StringData(b.Conditions[1].Reason), "one copy of each reason")
	assert.Equal(t, unsafe.StringData(string(a.Conditions[0].Status)), unsafe.StringData(string(b.Conditions[3].Status)))

	var empty Status
	empty.Compact()
	assert.Nil(t, empty.Conditions)
}
