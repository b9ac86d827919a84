package check

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kagenti/platform/pkg/duck"
)

// controllers checks each expected pillar's controller: its Deployment's readiness where it is
// deployed in the cluster, and in any case that it reconciles (a probe got a status).
func (r *runner) controllers(ctx context.Context, probes *probes) {
	for _, name := range AllPillars {
		if !r.opts.expects(name) {
			continue
		}
		subject := "kagenti-" + name
		install := fmt.Sprintf("install it: kubectl apply -k deploy/kustomize/overlays/%s-only (helm: --set %s.enabled=true)", name, name)
		logs := fmt.Sprintf("kubectl -n %s describe deployment %s; kubectl -n %s logs deployment/%s", r.opts.Namespace, subject, r.opts.Namespace, subject)

		depState, depOK, found := r.deployment(ctx, subject)
		if found && !depOK {
			r.fail(subject, logs, "%s", depState)
			continue
		}
		if name == "injector" {
			r.injectorController(found, depState, install)
			continue
		}
		if probes.skipped != "" || (name != "netpol" && !contains(r.crdOK, name)) || (name == "netpol" && !contains(r.crdOK, "agentcard")) {
			why := probes.skipped
			if why == "" {
				why = "its CRD is missing"
				if name == "netpol" {
					why = "the AgentCard CRD is missing"
				}
			}
			switch {
			case found:
				r.pass(subject, "%s (reconcile probe skipped: %s)", depState, why)
			default:
				r.fail(subject, install, "no Deployment %s/%s, and no reconcile probe (%s)", r.opts.Namespace, subject, why)
			}
			continue
		}
		kind := pillars[name].gvk.Kind
		if name == "netpol" {
			kind = "AgentCard"
		}
		ok, problem := probes.reconciled(ctx, name)
		switch {
		case ok && found:
			r.pass(subject, "%s; reconciled a probe %s", depState, kind)
		case ok:
			r.pass(subject, "reconciled a probe %s (no Deployment in %s: it runs outside the cluster)", kind, r.opts.Namespace)
		case problem != "":
			r.fail(subject, logs, "%s", problem)
		case found:
			r.fail(subject, logs, "%s, but nothing reconciled a probe %s within %s", depState, kind, r.opts.Timeout)
		default:
			r.fail(subject, install, "not running: no Deployment %s/%s, and nothing reconciled a probe %s within %s", r.opts.Namespace, subject, kind, r.opts.Timeout)
		}
	}
}

func (r *runner) injectorController(found bool, depState, install string) {
	switch {
	case found:
		r.pass("kagenti-injector", "%s", depState)
	case r.injectorURL != "" && r.injectorAnswers == nil:
		r.skip("kagenti-injector", "registered at %s (no Deployment in %s: it runs outside the cluster); not tried", r.injectorURL, r.opts.Namespace)
	case r.injectorURL != "" && *r.injectorAnswers:
		r.pass("kagenti-injector", "answers at %s (no Deployment in %s: it runs outside the cluster)", r.injectorURL, r.opts.Namespace)
	case r.injectorURL != "":
		r.fail("kagenti-injector", "start it where its registration points, or register it where it runs",
			"no Deployment in %s, and nothing answers at %s, where its webhook is registered", r.opts.Namespace, r.injectorURL)
	case r.injectorRegistered:
		r.fail("kagenti-injector", install, "its webhook is registered but no Deployment %s/kagenti-injector serves it", r.opts.Namespace)
	default:
		r.fail("kagenti-injector", install, "not installed: no Deployment %s/kagenti-injector and no webhook registration", r.opts.Namespace)
	}
}

// deployment reports the readiness of the pillar's Deployment, if there is one.
func (r *runner) deployment(ctx context.Context, name string) (state string, ready, found bool) {
	u, err := r.c.Get(ctx, deploymentGVK, r.opts.Namespace, name)
	if apierrors.IsNotFound(err) {
		return "", false, false
	}
	if err != nil {
		return fmt.Sprintf("cannot read Deployment %s/%s: %v", r.opts.Namespace, name, err), false, true
	}
	w, err := duck.NewWorkload(u)
	if err != nil {
		return err.Error(), false, true
	}
	rd := w.Readiness()
	return fmt.Sprintf("Deployment %s/%s: %s", r.opts.Namespace, name, rd.Message), rd.Ready, true
}
