// Package migrate turns legacy Kagenti objects (the kagenti-operator's agent.kagenti.dev Agent,
// AgentRuntime, AgentCard and AgentBuild, and the design's kagenti.io Agent) into their composition
// equivalent: a plain Deployment and Service, an AgentBuild wired to the Deployment, and the pillar
// CRs (TokenExchange, AgentTrace, AgentCard) that the legacy settings need.
//
// The conversion is a pure function of the inputs: no API calls. Every leaf of every input is
// accounted for in a Ledger, either migrated or reported as not migrated with a reason.
package migrate

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	cardv1 "github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/cli/internal/manifest"
)

// Legacy API groups and kinds.
const (
	// UpstreamGroup is the kagenti-operator's API group.
	UpstreamGroup = "agent.kagenti.dev"
	// SeedGroup is the group of the design document's Agent example (and of the new pillar CRs).
	SeedGroup = "kagenti.io"
)

var (
	UpstreamAgent        = schema.GroupVersionKind{Group: UpstreamGroup, Version: "v1alpha1", Kind: "Agent"}
	UpstreamAgentRuntime = schema.GroupVersionKind{Group: UpstreamGroup, Version: "v1alpha1", Kind: "AgentRuntime"}
	UpstreamAgentCard    = schema.GroupVersionKind{Group: UpstreamGroup, Version: "v1alpha1", Kind: "AgentCard"}
	UpstreamAgentBuild   = schema.GroupVersionKind{Group: UpstreamGroup, Version: "v1alpha1", Kind: "AgentBuild"}
	SeedAgent            = schema.GroupVersionKind{Group: SeedGroup, Version: "v1alpha1", Kind: "Agent"}
)

// LegacyKinds are the kinds migrate converts, in the order --from-cluster reads them.
var LegacyKinds = []schema.GroupVersionKind{UpstreamAgentBuild, UpstreamAgent, SeedAgent, UpstreamAgentRuntime, UpstreamAgentCard}

// workloadKinds pass through unchanged (with the labels an AgentRuntime asks for) when they are
// among the inputs: they are what AgentRuntimes target.
var workloadKinds = map[schema.GroupVersionKind]bool{
	{Group: "apps", Version: "v1", Kind: "Deployment"}:  true,
	{Group: "apps", Version: "v1", Kind: "StatefulSet"}: true,
	{Group: "apps", Version: "v1", Kind: "DaemonSet"}:   true,
	{Group: "apps", Version: "v1", Kind: "ReplicaSet"}:  true,
	{Group: "batch", Version: "v1", Kind: "Job"}:        true,
	{Group: "batch", Version: "v1", Kind: "CronJob"}:    true,
}

// Source identifies one input object.
type Source struct {
	// Where is the input document ("agents.yaml, document 2") or "cluster".
	Where      string
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	// UID is set for objects read from the cluster.
	UID types.UID
}

// GroupVersionKind of the source object.
func (s Source) GroupVersionKind() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(s.APIVersion, s.Kind)
}

// Ref is "Kind ns/name" (or "Kind name" without namespace).
func (s Source) Ref() string {
	if s.Namespace == "" {
		return s.Kind + " " + s.Name
	}
	return s.Kind + " " + s.Namespace + "/" + s.Name
}

func (s Source) String() string {
	return fmt.Sprintf("%s %s (%s)", s.APIVersion, s.Ref(), s.Where)
}

// Input is one object to migrate.
type Input struct {
	Source Source
	Object *unstructured.Unstructured
}

// FromDocuments wraps documents read with manifest.Read.
func FromDocuments(docs []manifest.Document) []Input {
	out := make([]Input, 0, len(docs))
	for _, d := range docs {
		out = append(out, Input{Source: sourceOf(d.Where(), d.Object), Object: d.Object})
	}
	return out
}

// FromCluster wraps objects listed from the cluster.
func FromCluster(objs []*unstructured.Unstructured) []Input {
	out := make([]Input, 0, len(objs))
	for _, o := range objs {
		out = append(out, Input{Source: sourceOf("cluster", o), Object: o})
	}
	return out
}

func sourceOf(where string, o *unstructured.Unstructured) Source {
	return Source{Where: where, APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(), UID: o.GetUID()}
}

// Finding is a subtree of a legacy object that was not migrated.
type Finding struct {
	Source Source
	// Path of the subtree (kubectl explain notation).
	Path string
	// Leaves is the number of values under Path.
	Leaves int
	// Reason says why, and what to do instead where there is something to do.
	Reason string
}

// Object is one object migrate writes.
type Object struct {
	*unstructured.Unstructured
	// From are the legacy objects it was made from.
	From []Source
	// Patch marks an apply configuration for an existing object: only the fields migrate sets
	// (labels and volumes an AgentRuntime asks for on its target workload). Apply it server-side.
	Patch bool
	// Notes say what migrate decided for this object and why (defaults it made explicit, images it
	// chose, ports it moved).
	Notes []string
}

// Ref is "Kind/name", the key ledgers use to name output objects.
func (o *Object) Ref() string { return o.GetKind() + "/" + o.GetName() }

// Result is the outcome of a migration.
type Result struct {
	// Objects in apply order.
	Objects []*Object
	// Findings are what was not migrated, per legacy object.
	Findings []Finding
	// Migrated are the legacy objects that were converted (not the workloads passed through).
	Migrated []Input
	// Ledgers account for every leaf of every legacy object (for tests and --strict).
	Ledgers []*Ledger
}

// Options tune a migration.
type Options struct {
	// Namespace is given to objects without one when set (kubectl's -n for files).
	Namespace string
	// Distribution is where the kagenti-operator ran: "kubernetes" (default) or "openshift"; it
	// decides which pod security defaults the operator had added to Agents' pods.
	Distribution string
	// Live holds existing objects of the cluster, when migrating from it: the Deployment an Agent
	// owns (its selector is immutable) and the workloads AgentRuntimes target.
	Live map[string]*unstructured.Unstructured
}

// Distributions the kagenti-operator knew.
const (
	DistributionKubernetes = "kubernetes"
	DistributionOpenShift  = "openshift"
)

// LiveKey is the key of a workload in Options.Live.
func LiveKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// UnknownKindError names an input migrate cannot convert.
type UnknownKindError struct {
	Where      string
	APIVersion string
	Kind       string
}

func (e *UnknownKindError) Error() string {
	return fmt.Sprintf("%s: %s %s is not a legacy Kagenti object migrate converts (it converts %s, and passes through the workloads an AgentRuntime targets)",
		e.Where, e.APIVersion, e.Kind, legacyKindList())
}

func legacyKindList() string {
	var names []string
	for _, k := range []schema.GroupVersionKind{UpstreamAgent, UpstreamAgentRuntime, UpstreamAgentCard, UpstreamAgentBuild, SeedAgent} {
		names = append(names, k.GroupVersion().String()+" "+k.Kind)
	}
	return strings.Join(names, ", ")
}

// Migrate converts the inputs. It fails on inputs it does not know and on inputs that cannot be
// converted at all (an Agent without a pod template); everything else that cannot be carried over is
// a Finding.
func Migrate(inputs []Input, opts Options) (*Result, error) {
	if opts.Distribution == "" {
		opts.Distribution = DistributionKubernetes
	}
	if opts.Distribution != DistributionKubernetes && opts.Distribution != DistributionOpenShift {
		return nil, fmt.Errorf("distribution %q: must be %s or %s", opts.Distribution, DistributionKubernetes, DistributionOpenShift)
	}
	m := &migrator{opts: opts, workloads: map[string]*workload{}, builds: map[string]*buildInput{}, order: map[Source]int{}}
	if err := m.classify(inputs); err != nil {
		return nil, err
	}
	for _, step := range []func() error{m.migrateBuilds, each(m.agents, m.agent), each(m.runtimes, m.runtime), each(m.cards, m.card)} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return m.finish()
}

// each is the step that migrates every one of inputs, in order, until one fails.
func each(inputs []Input, migrate func(Input) error) func() error {
	return func() error {
		for _, in := range inputs {
			if err := migrate(in); err != nil {
				return err
			}
		}
		return nil
	}
}

type migrator struct {
	opts Options

	agents, runtimes, cards []Input
	buildOrder              []string
	builds                  map[string]*buildInput // by namespace/name
	passthrough             []Input

	order         map[Source]int       // input position of each source
	workloads     map[string]*workload // by LiveKey
	workloadOrder []string
	selectorCards []*pillarOut[cardv1.AgentCardSpec] // cards in selector mode (no workload)
	ledgers       []*Ledger
	migrated      []Input
}

func (m *migrator) classify(inputs []Input) error {
	for i, in := range inputs {
		if m.opts.Namespace != "" && in.Object.GetNamespace() == "" {
			in.Object.SetNamespace(m.opts.Namespace)
			in.Source.Namespace = m.opts.Namespace
		}
		m.order[in.Source] = i
		if in.Object.GetName() == "" {
			return fmt.Errorf("%s: %s %s has no metadata.name", in.Source.Where, in.Source.APIVersion, in.Source.Kind)
		}
		gvk := in.Object.GroupVersionKind()
		switch {
		case gvk == UpstreamAgent || gvk == SeedAgent:
			m.agents = append(m.agents, in)
		case gvk == UpstreamAgentRuntime:
			m.runtimes = append(m.runtimes, in)
		case gvk == UpstreamAgentCard:
			m.cards = append(m.cards, in)
		case gvk == UpstreamAgentBuild:
			key := in.Object.GetNamespace() + "/" + in.Object.GetName()
			if _, dup := m.builds[key]; dup {
				return fmt.Errorf("%s: AgentBuild %s appears twice among the inputs", in.Source.Where, key)
			}
			m.builds[key] = &buildInput{Input: in}
			m.buildOrder = append(m.buildOrder, key)
		case workloadKinds[gvk]:
			m.passthrough = append(m.passthrough, in)
			w := m.workload(gvk.Kind, in.Object.GetNamespace(), in.Object.GetName())
			if w.full != nil {
				return fmt.Errorf("%s: %s %s appears twice among the inputs", in.Source.Where, gvk.Kind, in.Object.GetName())
			}
			w.full = in.Object.DeepCopy()
			w.apiVersion = in.Object.GetAPIVersion()
			w.fromInput = true
		default:
			return &UnknownKindError{Where: in.Source.Where, APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}
		}
	}
	return nil
}

// workload returns the composition being built for one workload, creating it on first use.
func (m *migrator) workload(kind, namespace, name string) *workload {
	key := LiveKey(kind, namespace, name)
	if w, ok := m.workloads[key]; ok {
		return w
	}
	w := &workload{kind: kind, namespace: namespace, name: name, addLabels: map[string]string{}}
	m.workloads[key] = w
	m.workloadOrder = append(m.workloadOrder, key)
	return w
}

func (m *migrator) live(kind, namespace, name string) *unstructured.Unstructured {
	if m.opts.Live == nil {
		return nil
	}
	return m.opts.Live[LiveKey(kind, namespace, name)]
}

func (m *migrator) finish() (*Result, error) {
	res := &Result{Migrated: m.migrated}
	for _, key := range m.workloadOrder {
		objs, err := m.workloads[key].objects()
		if err != nil {
			return nil, err
		}
		res.Objects = append(res.Objects, objs...)
	}
	for _, c := range m.selectorCards {
		obj, err := pillarObject(c, "AgentCard", cardv1.GroupVersion.String()).object()
		if err != nil {
			return nil, err
		}
		res.Objects = append(res.Objects, obj)
	}
	for _, key := range m.buildOrder {
		if b := m.builds[key]; b.out != nil && !b.emitted {
			obj, err := b.object()
			if err != nil {
				return nil, err
			}
			res.Objects = append(res.Objects, obj)
		}
	}
	byRef := map[string]map[string]any{}
	for _, o := range res.Objects {
		byRef[o.GetNamespace()+"/"+o.Ref()] = o.Object
	}
	for _, l := range m.ledgers {
		accountMetadata(l)
		l.verify(byRef)
		l.Close()
		res.Findings = append(res.Findings, l.Findings()...)
		res.Ledgers = append(res.Ledgers, l)
	}
	// Findings grouped per legacy object in input order, and by path within one.
	sort.SliceStable(res.Findings, func(i, j int) bool {
		a, b := res.Findings[i], res.Findings[j]
		if m.order[a.Source] != m.order[b.Source] {
			return m.order[a.Source] < m.order[b.Source]
		}
		return a.Path < b.Path
	})
	return res, nil
}

func (m *migrator) ledger(in Input) *Ledger {
	l := NewLedger(in.Source, in.Object.Object)
	m.ledgers = append(m.ledgers, l)
	m.migrated = append(m.migrated, in)
	// Never carried anywhere, whatever a kind does with the other annotations.
	l.NotMigrated(P("metadata", "annotations", lastApplied), reasonLastApplied)
	return l
}

// Reasons shared by every legacy kind.
const (
	reasonServerMetadata = "set by the API server for the legacy object; the migrated objects get their own"
	reasonStatus         = "observed state of the legacy object; the migrated objects report their own status"
	reasonOwners         = "the legacy object's owners; the migrated objects are not owned by them"
	reasonFinalizers     = "finalizers of the legacy object's controller; with --delete-old, migrate removes the kagenti-operator's finalizer so that it cannot delete the migrated Deployment and Service"
	reasonLastApplied    = "kubectl's record of how the legacy object was last applied; it describes that object, not the migrated ones"
)

// accountMetadata accounts for the metadata every legacy object has that no migrated object takes,
// after each kind has taken what it uses (the first mark of a leaf wins). Name, namespace, labels
// and annotations are accounted for by each kind.
func accountMetadata(l *Ledger) {
	l.Used(P("apiVersion"), "identifies the legacy kind")
	l.Used(P("kind"), "identifies the legacy kind")
	for _, f := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"} {
		l.NotMigrated(P("metadata", f), reasonServerMetadata)
	}
	l.NotMigrated(P("metadata", "ownerReferences"), reasonOwners)
	l.NotMigrated(P("metadata", "finalizers"), reasonFinalizers)
	l.NotMigrated(P("metadata", "annotations", "kubectl.kubernetes.io/last-applied-configuration"), reasonLastApplied)
	l.NotMigrated(P("status"), reasonStatus)
}
