// Package callgraph reads the delegation graph's edges out of kagenti-authbridge's metrics: each
// inbound proxy counts the calls it received by immediate caller, by the workloads the call came
// through before it (the verified token's act chain) and by whether it was let through
// (contract.MetricCalls). kagenti describe and agentcard's discovery API sum them over a
// workload's pods with Edges.
package callgraph

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kagenti/platform/pkg/configmap/contract"
)

// Edge is the calls into one workload from Caller, through Via.
type Edge struct {
	// Caller is the immediate caller's identity as the token names it (a SPIFFE ID, or the
	// client ID of a client registered without one).
	Caller string `json:"caller"`
	// Via are the workloads before the caller in the token's delegation chain: the caller's own
	// caller first, the first actor last. Empty for a direct call.
	Via     []string `json:"via,omitempty"`
	Allowed float64  `json:"allowed"`
	Denied  float64  `json:"denied"`
}

// Parse returns the contract.MetricCalls series of one Prometheus text exposition as edges, one per
// (caller, chain); other metrics are ignored. An exposition that does not parse is an error.
func Parse(exposition []byte) ([]Edge, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(exposition))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	var sum Edges
	for _, m := range families[contract.MetricCalls].GetMetric() {
		var e Edge
		var via, result string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case contract.CallsCaller:
				e.Caller = l.GetValue()
			case contract.CallsVia:
				via = l.GetValue()
			case contract.CallsResult:
				result = l.GetValue()
			}
		}
		if via != "" {
			e.Via = strings.Split(via, ",")
		}
		v := m.GetCounter().GetValue() + m.GetUntyped().GetValue() // untyped: an exposition without its # TYPE line
		if result == contract.CallAllowed {
			e.Allowed = v
		} else {
			e.Denied = v
		}
		sum.Add(e)
	}
	return sum.List(), nil
}

// Edges sums edges (of several pods) by caller and chain. The zero value is ready to use; it is
// not safe for concurrent use.
type Edges struct {
	m map[[2]string]*Edge
}

// Add adds the calls of edges.
func (e *Edges) Add(edges ...Edge) {
	if e.m == nil {
		e.m = map[[2]string]*Edge{}
	}
	for _, x := range edges {
		key := [2]string{x.Caller, strings.Join(x.Via, ",")}
		sum := e.m[key]
		if sum == nil {
			sum = &Edge{Caller: x.Caller, Via: x.Via}
			e.m[key] = sum
		}
		sum.Allowed += x.Allowed
		sum.Denied += x.Denied
	}
}

// List returns the edges ordered by caller, then chain.
func (e *Edges) List() []Edge {
	keys := make([][2]string, 0, len(e.m))
	for k := range e.m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	out := make([]Edge, 0, len(keys))
	for _, k := range keys {
		out = append(out, *e.m[k])
	}
	return out
}
