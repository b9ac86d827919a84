package check

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kagenti/platform/cli/internal/kube"
)

// A probe is a small object of a pillar's kind, created in a scratch namespace, that targets a
// workload which does not exist: whichever controller reconciles it writes its status (TargetNotFound
// and the like) without touching anything else. A probe that gets a status proves the controller
// runs and reconciles, wherever it runs (a Deployment, or a process outside the cluster).
type probes struct {
	c         *kube.Clients
	ns        string // scratch namespace; "" when none
	skipped   string // why there are no probes
	objects   map[string]*unstructured.Unstructured
	deadline  time.Time
	createErr map[string]error
}

const (
	probeName   = "kagenti-check"
	probeTarget = "kagenti-check-absent"
	// ManagedByCheck labels what check creates.
	managedBy = "kagenti-check"
)

func (r *runner) startProbes(ctx context.Context) *probes {
	p := &probes{c: r.c, objects: map[string]*unstructured.Unstructured{}, createErr: map[string]error{}, deadline: time.Now().Add(r.opts.Timeout)}
	if r.opts.ReadOnly {
		p.skipped = "--read-only"
		return p
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kagenti-check-", Labels: map[string]string{
		"kagenti.io/injection": "enabled", "app.kubernetes.io/managed-by": managedBy}}}
	created, err := r.c.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		p.skipped = fmt.Sprintf("cannot create a scratch namespace: %v", err)
		return p
	}
	p.ns = created.Name
	for _, name := range r.crdOK {
		pl := pillars[name]
		if !r.opts.expects(name) && !(name == "agentcard" && r.opts.expects("netpol")) {
			continue
		}
		u := probeObject(pl, p.ns)
		ri, _, err := r.c.Resource(pl.gvk, p.ns)
		if err == nil {
			u, err = ri.Create(ctx, u, metav1.CreateOptions{FieldManager: managedBy})
		}
		if err != nil {
			p.createErr[name] = err
			continue
		}
		p.objects[name] = u
	}
	return p
}

// probeObject is the smallest valid object of the pillar's kind that changes nothing in the cluster.
func probeObject(p pillar, ns string) *unstructured.Unstructured {
	target := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": probeTarget}
	spec := map[string]any{"targetRef": target}
	switch p.name {
	case "agenttrace":
		spec["exporters"] = []any{map[string]any{"type": "console"}}
	case "agentbuild":
		// A custom pipeline whose only step names a ConfigMap that does not exist: the template
		// cannot resolve, so nothing is ever built.
		spec = map[string]any{
			"mode":        "custom",
			"source":      map[string]any{"repository": "https://kagenti-check.invalid/probe"},
			"buildOutput": map[string]any{"image": "kagenti-check/probe"},
			"pipeline":    map[string]any{"steps": []any{map[string]any{"name": "probe", "configMap": probeTarget}}},
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(p.gvk)
	u.SetNamespace(ns)
	u.SetName(probeName)
	u.SetLabels(map[string]string{"app.kubernetes.io/managed-by": managedBy})
	return u
}

// reconciled waits (until the shared deadline) for the pillar's controller to write the probe's
// status; it returns what was seen.
func (p *probes) reconciled(ctx context.Context, pillarName string) (bool, string) {
	probeOf := pillarName
	if pillarName == "netpol" {
		probeOf = "agentcard" // netpol reports on AgentCards with its own condition
	}
	obj, ok := p.objects[probeOf]
	if !ok {
		if err := p.createErr[probeOf]; err != nil {
			return false, fmt.Sprintf("the probe %s could not be created: %v", pillars[probeOf].gvk.Kind, err)
		}
		return false, ""
	}
	ri, _, err := p.c.Resource(obj.GroupVersionKind(), p.ns)
	if err != nil {
		return false, err.Error()
	}
	seen := false
	check := func(ctx context.Context) (bool, error) {
		u, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		seen = observed(pillarName, u)
		return seen, nil
	}
	// Read once whatever the deadline: the wait for an earlier pillar's probe may have used it up,
	// and a probe reconciled meanwhile counts.
	if ok, _ := check(ctx); ok {
		return true, ""
	}
	_ = wait.PollUntilContextCancel(deadlineCtx(ctx, p.deadline), 250*time.Millisecond, false, check)
	return seen, ""
}

// observed says whether the pillar's controller wrote the probe's status.
func observed(pillarName string, u *unstructured.Unstructured) bool {
	conds := kube.Conditions(u)
	if pillarName == "netpol" {
		return kube.FindCondition(conds, "NetworkPolicyReady") != nil
	}
	if og, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); found && og >= u.GetGeneration() {
		return true
	}
	for _, c := range conds {
		if c.Type != "NetworkPolicyReady" && c.ObservedGeneration >= u.GetGeneration() {
			return true
		}
	}
	return false
}

func deadlineCtx(ctx context.Context, deadline time.Time) context.Context {
	c, cancel := context.WithDeadline(ctx, deadline)
	go func() { <-c.Done(); cancel() }()
	return c
}

// cleanup deletes the scratch namespace and everything in it.
func (p *probes) cleanup() {
	if p.ns == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.c.Kube.CoreV1().Namespaces().Delete(ctx, p.ns, metav1.DeleteOptions{})
}
