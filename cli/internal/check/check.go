// Package check checks a cluster's Kagenti installation: CRDs, controllers, webhooks (certificate,
// CA bundle, reachability), what identity needs (SPIRE's CSI driver, the trust bundle, the IdP) and
// whether the Pod Security level of each namespace selected for injection allows the injection.
// Every result says how to fix what fails.
package check

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kagenti/platform/cli/internal/kube"
)

// Status of one check.
type Status string

const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Result is one line of the report.
type Result struct {
	Status  Status `json:"status"`
	Subject string `json:"subject"`
	Detail  string `json:"detail"`
	Fix     string `json:"fix,omitempty"`
}

// Options tune a check.
type Options struct {
	// Namespace Kagenti is installed in.
	Namespace string
	// Pillars expected to be installed.
	Pillars []string
	// Timeout bounds the waits (reconcile probes).
	Timeout time.Duration
	// ReadOnly skips everything that writes: the scratch namespace, the webhook's dry run and the
	// reconcile probes.
	ReadOnly bool
	// Identity is "auto" (checked when a workload is labelled kagenti.io/spiffe=enabled), "true" or "false".
	Identity string
	// TrustBundle is the trust bundle ConfigMap, namespace/name; empty: from the agentcard
	// Deployment's --trust-bundle-configmap, else kagenti-system/spire-bundle.
	TrustBundle string
}

// AllPillars in install order.
var AllPillars = []string{"injector", "tokenexchange", "agenttrace", "agentcard", "agentbuild", "netpol"}

// pillar facts.
type pillar struct {
	name string
	crd  string                  // the CRD it owns, "" for none
	gvk  schema.GroupVersionKind // its kind, for probes
}

var pillars = map[string]pillar{
	"injector":      {name: "injector"},
	"tokenexchange": {name: "tokenexchange", crd: "tokenexchanges.kagenti.io", gvk: schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "TokenExchange"}},
	"agenttrace":    {name: "agenttrace", crd: "agenttraces.kagenti.io", gvk: schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentTrace"}},
	"agentcard":     {name: "agentcard", crd: "agentcards.kagenti.io", gvk: schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentCard"}},
	"agentbuild":    {name: "agentbuild", crd: "agentbuilds.kagenti.io", gvk: schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentBuild"}},
	"netpol":        {name: "netpol"},
}

// Validate rejects unknown pillar names.
func (o Options) Validate() error {
	for _, p := range o.Pillars {
		if _, ok := pillars[p]; !ok {
			return fmt.Errorf("unknown pillar %q: %s", p, strings.Join(AllPillars, ", "))
		}
	}
	switch o.Identity {
	case "auto", "true", "false":
	default:
		return fmt.Errorf("--identity=%s: auto, true or false", o.Identity)
	}
	return nil
}

func (o Options) expects(name string) bool {
	for _, p := range o.Pillars {
		if p == name {
			return true
		}
	}
	return false
}

// Run runs every check, in the order they are printed.
func Run(ctx context.Context, c *kube.Clients, opts Options) []Result {
	r := &runner{c: c, opts: opts}
	r.crds(ctx)
	probes := r.startProbes(ctx)
	r.webhooks(ctx, probes)
	r.controllers(ctx, probes)
	r.identity(ctx)
	r.podSecurity(ctx)
	r.federation(ctx)
	probes.cleanup()
	return r.results
}

type runner struct {
	c       *kube.Clients
	opts    Options
	results []Result
	// crdOK are the pillars whose CRD is installed and serves the expected version.
	crdOK []string
	// injectorRegistered: a MutatingWebhookConfiguration has inject.kagenti.io; injectorURL is its
	// URL when it is registered by URL (the webhook runs outside the cluster).
	injectorRegistered bool
	injectorURL        string
	// injectorAnswers is the outcome of the webhook's dry run; nil when it was not tried.
	injectorAnswers *bool
}

func (r *runner) pass(subject, format string, args ...any) {
	r.results = append(r.results, Result{Status: Pass, Subject: subject, Detail: fmt.Sprintf(format, args...)})
}

func (r *runner) fail(subject, fix, format string, args ...any) {
	r.results = append(r.results, Result{Status: Fail, Subject: subject, Detail: fmt.Sprintf(format, args...), Fix: fix})
}

func (r *runner) skip(subject, format string, args ...any) {
	r.results = append(r.results, Result{Status: Skip, Subject: subject, Detail: fmt.Sprintf(format, args...)})
}

// Failed counts the failed checks.
func Failed(results []Result) int {
	n := 0
	for _, res := range results {
		if res.Status == Fail {
			n++
		}
	}
	return n
}

// Write prints one line per check (✓ pass, ✗ fail, – skipped) and the fix under each failure.
func Write(w io.Writer, results []Result) error {
	var b strings.Builder
	for _, res := range results {
		mark := map[Status]string{Pass: "✓", Fail: "✗", Skip: "–"}[res.Status]
		fmt.Fprintf(&b, "%s %s: %s\n", mark, res.Subject, res.Detail)
		if res.Fix != "" {
			for _, line := range strings.Split(res.Fix, "\n") {
				fmt.Fprintf(&b, "    fix: %s\n", line)
			}
		}
	}
	if n := Failed(results); n > 0 {
		fmt.Fprintf(&b, "\n%d of %d checks failed.\n", n, len(results))
	} else {
		fmt.Fprintf(&b, "\nAll checks passed.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
