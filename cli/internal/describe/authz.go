package describe

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kagenti/platform/cli/internal/kube"
	"github.com/kagenti/platform/pkg/configmap/callgraph"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

// Authorization is the inbound policy in effect for the workload: its TokenExchange's
// spec.inbound.authorization and what the controller reports of delegation.
type Authorization struct {
	TokenExchange string `json:"tokenExchange"`
	Rules         []Rule `json:"rules,omitempty"`
	// Default is what happens when no rule matches: the spec's, else Deny when an Allow rule
	// exists and Allow otherwise (the data plane's rule).
	Default       string `json:"default"`
	DryRun        bool   `json:"dryRun,omitempty"`
	MaxChainDepth int64  `json:"maxChainDepth,omitempty"`
	// Delegation is status.delegation: chained (every hop in the signed token) or immediateCaller.
	Delegation string `json:"delegation,omitempty"`
}

// Egress is the workload's egress policy: what its outbound proxy lets it call at all.
type Egress struct {
	TokenExchange string `json:"tokenExchange"`
	// Default is what a destination no rule allows gets: Allow unless the spec says Deny.
	Default string `json:"default"`
	DryRun  bool   `json:"dryRun,omitempty"`
	// Allow are the rules in order, each as "host h", "cidr c" or "agent name.namespace", with
	// its ports.
	Allow []string `json:"allow,omitempty"`
}

// egressOf reads a TokenExchange's egress policy; nil when it sets none.
func egressOf(u *unstructured.Unstructured) *Egress {
	spec, found, _ := unstructured.NestedMap(u.Object, "spec", "outbound", "egress")
	if !found {
		return nil
	}
	e := &Egress{TokenExchange: u.GetName(), Default: "Allow"}
	if d, _, _ := unstructured.NestedString(spec, "default"); d != "" {
		e.Default = d
	}
	e.DryRun, _, _ = unstructured.NestedBool(spec, "dryRun")
	rules, _, _ := unstructured.NestedSlice(spec, "allow")
	for _, r := range rules {
		m, _ := r.(map[string]any)
		var what string
		switch {
		case m["host"] != nil:
			what = fmt.Sprintf("host %v", m["host"])
		case m["cidr"] != nil:
			what = fmt.Sprintf("cidr %v", m["cidr"])
		case m["agent"] != nil:
			a, _ := m["agent"].(map[string]any)
			ns, _ := a["namespace"].(string)
			if ns == "" {
				ns = u.GetNamespace()
			}
			what = fmt.Sprintf("agent %v.%s", a["name"], ns)
		}
		if ports, _ := m["ports"].([]any); len(ports) > 0 {
			ps := make([]string, len(ports))
			for i, p := range ports {
				ps[i] = fmt.Sprint(p)
			}
			what += " ports " + strings.Join(ps, ",")
		}
		e.Allow = append(e.Allow, what)
	}
	return e
}

// Rule is one named rule.
type Rule struct {
	Name   string `json:"name"`
	Effect string `json:"effect"`
	When   string `json:"when"`
}

// Graph is the workload's part of the delegation graph: who called it, on whose chain.
type Graph struct {
	Edges []callgraph.Edge `json:"edges,omitempty"`
	// Pods is how many pods answered; Unavailable says why the others did not.
	Pods        int      `json:"pods"`
	Unavailable []string `json:"unavailable,omitempty"`
}

// authorizationOf reads a TokenExchange's inbound policy; nil when it sets none.
func authorizationOf(u *unstructured.Unstructured) *Authorization {
	spec, found, _ := unstructured.NestedMap(u.Object, "spec", "inbound", "authorization")
	if !found {
		return nil
	}
	a := &Authorization{TokenExchange: u.GetName()}
	a.Delegation, _, _ = unstructured.NestedString(u.Object, "status", "delegation")
	a.DryRun, _, _ = unstructured.NestedBool(spec, "dryRun")
	a.MaxChainDepth, _, _ = unstructured.NestedInt64(spec, "maxChainDepth")
	rules, _, _ := unstructured.NestedSlice(spec, "rules")
	anyAllow := false
	for _, r := range rules {
		m, _ := r.(map[string]any)
		rule := Rule{}
		rule.Name, _ = m["name"].(string)
		rule.Effect, _ = m["effect"].(string)
		rule.When, _ = m["when"].(string)
		anyAllow = anyAllow || rule.Effect == "Allow"
		a.Rules = append(a.Rules, rule)
	}
	a.Default, _, _ = unstructured.NestedString(spec, "default")
	switch {
	case a.Default != "":
	case anyAllow:
		a.Default = "Deny (an Allow rule exists)"
	default:
		a.Default = "Allow"
	}
	return a
}

// metricsPort is where the authbridge's inbound role serves its metrics.
var metricsPort = strconv.Itoa(contract.StatusPortInbound)

// delegationGraph reads the calls the pods' authbridge counted, through the API server's pod
// proxy (pods/proxy get, the caller's own rights).
func delegationGraph(ctx context.Context, c *kube.Clients, pods []corev1.Pod) *Graph {
	g := &Graph{}
	var edges callgraph.Edges
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || !hasAuthbridge(&p.Spec) {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		raw, err := c.Kube.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, metricsPort, contract.MetricsPath, nil).DoRaw(pctx)
		cancel()
		if err != nil {
			g.Unavailable = append(g.Unavailable, fmt.Sprintf("%s: %v", p.Name, err))
			continue
		}
		calls, err := callgraph.Parse(raw)
		if err != nil {
			g.Unavailable = append(g.Unavailable, fmt.Sprintf("%s: %v", p.Name, err))
			continue
		}
		edges.Add(calls...)
		g.Pods++
	}
	g.Edges = edges.List()
	return g
}

// hasAuthbridge: the pod runs the injected authbridge container.
func hasAuthbridge(spec *corev1.PodSpec) bool {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			if c.Name == contract.ContainerAuthbridge {
				return true
			}
		}
	}
	return false
}

// writeAuthorization prints the policy and the graph.
func (r *Report) writeAuthorization(b *strings.Builder) {
	if a := r.Authorization; a != nil {
		line := fmt.Sprintf("\nAuthorization (TokenExchange %s): default %s", a.TokenExchange, a.Default)
		if a.DryRun {
			line += ", dry run (denials are logged, not enforced)"
		}
		if a.Delegation != "" {
			line += ", delegation " + a.Delegation
		}
		if a.MaxChainDepth > 0 {
			line += fmt.Sprintf(", chains of at most %d", a.MaxChainDepth)
		}
		fmt.Fprintln(b, line)
		for _, rule := range a.Rules {
			fmt.Fprintf(b, "  %s %s: %s\n", rule.Effect, rule.Name, rule.When)
		}
	}
	if e := r.Egress; e != nil {
		line := fmt.Sprintf("\nEgress (TokenExchange %s): default %s", e.TokenExchange, e.Default)
		if e.DryRun {
			line += ", dry run (denials are logged, not enforced)"
		}
		fmt.Fprintln(b, line)
		for _, a := range e.Allow {
			fmt.Fprintf(b, "  allow %s\n", a)
		}
	}
	g := r.Graph
	if g == nil || (len(g.Edges) == 0 && len(g.Unavailable) == 0) {
		return
	}
	if g.Pods == 0 {
		fmt.Fprintf(b, "\nCalls into it: not read from any of %d pod(s) (-o json has the errors)\n", len(g.Unavailable))
		return
	}
	fmt.Fprintf(b, "\nCalls into it (delegation graph, counted by %d pod(s)' authbridge):\n", g.Pods)
	for _, e := range g.Edges {
		from := e.Caller
		for _, v := range e.Via {
			from += " ← " + v
		}
		fmt.Fprintf(b, "  %s: %.0f allowed, %.0f denied\n", from, e.Allowed, e.Denied)
	}
	for _, u := range g.Unavailable {
		fmt.Fprintf(b, "  not read: %s\n", u)
	}
}
