package migrate

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	cardv1 "github.com/kagenti/platform/agentcard/api/v1alpha1"
)

const (
	defaultSyncPeriod = 30 * time.Second
	minSyncPeriod     = 5 * time.Second
)

const reasonAuditBinding = "audit-only identity binding has no per-card setting: netpol restricts the traffic of every unverified card while it runs in enforce mode (its --mode=audit makes the whole cluster audit-only)"

func (m *migrator) card(in Input) error {
	obj := in.Object
	name := obj.GetName()
	where := fmt.Sprintf("%s: AgentCard %s", in.Source.Where, name)
	str := func(path ...string) string {
		s, _, _ := unstructured.NestedString(obj.Object, path...)
		return s
	}
	var out *pillarOut[cardv1.AgentCardSpec]
	kind, target := str("spec", "targetRef", "kind"), str("spec", "targetRef", "name")
	selector, hasSelector, _ := unstructured.NestedMap(obj.Object, "spec", "selector")
	switch {
	case kind != "" && target != "":
		w := m.workload(kind, obj.GetNamespace(), target)
		if w.apiVersion == "" {
			w.apiVersion = str("spec", "targetRef", "apiVersion")
		}
		if w.card != nil && !w.card.madeFrom(in.Source) && w.card.name != w.name+"-card" {
			return fmt.Errorf("%s: AgentCard %s targets %s %s too; an AgentCard per workload", where, w.card.name, kind, target)
		}
		out = w.cardFor(m, in.Source)
		out.name = name // the legacy card's name wins over the one made for an Agent's description
	case hasSelector:
		var sel metav1.LabelSelector
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(selector, &sel); err != nil {
			return fmt.Errorf("%s: spec.selector: %w", where, err)
		}
		out = &pillarOut[cardv1.AgentCardSpec]{name: name, namespace: obj.GetNamespace(), from: []Source{in.Source}}
		out.spec.Selector = &sel
		m.selectorCards = append(m.selectorCards, out)
	default:
		return fmt.Errorf("%s: spec.targetRef (kind and name) or spec.selector is required", where)
	}
	l := m.ledger(in)
	ref := "AgentCard/" + name
	l.Used(P("metadata", "name"), "names the AgentCard")
	l.Used(P("metadata", "namespace"), "namespace of the AgentCard")
	copyMetadata(l, obj, ref, &out.labels, &out.annotations)
	if out.spec.TargetRef != nil {
		l.Copied(P("spec", "targetRef", "kind"), ref, P("spec", "targetRef", "kind"))
		l.Copied(P("spec", "targetRef", "name"), ref, P("spec", "targetRef", "name"))
		if v := str("spec", "targetRef", "apiVersion"); v != "" {
			out.spec.TargetRef.APIVersion = v
			l.Copied(P("spec", "targetRef", "apiVersion"), ref, P("spec", "targetRef", "apiVersion"))
		}
	} else {
		l.Copied(P("spec", "selector"), ref, P("spec", "selector"))
	}

	if raw := str("spec", "syncPeriod"); raw != "" {
		d, err := time.ParseDuration(raw)
		switch {
		case err != nil:
			l.NotMigrated(P("spec", "syncPeriod"), fmt.Sprintf("%q is not a duration; the default 30s applies", raw))
		case d == defaultSyncPeriod:
			l.Used(P("spec", "syncPeriod"), "30s is AgentCard's default")
		case d < minSyncPeriod:
			out.spec.SyncPeriod = &metav1.Duration{Duration: minSyncPeriod}
			l.Used(P("spec", "syncPeriod"), "raised to 5s, AgentCard's minimum")
			out.notes = append(out.notes, fmt.Sprintf("spec.syncPeriod: 5s (was %s, below the minimum)", raw))
		default:
			out.spec.SyncPeriod = &metav1.Duration{Duration: d}
			l.Copied(P("spec", "syncPeriod"), ref, P("spec", "syncPeriod"))
		}
	}
	if td := str("spec", "identityBinding", "trustDomain"); td != "" {
		out.spec.IdentityBinding = orNew(out.spec.IdentityBinding)
		out.spec.IdentityBinding.TrustDomain = strings.ToLower(td)
		if td == out.spec.IdentityBinding.TrustDomain {
			l.Copied(P("spec", "identityBinding", "trustDomain"), ref, P("spec", "identityBinding", "trustDomain"))
		} else {
			l.Used(P("spec", "identityBinding", "trustDomain"), "spec.identityBinding.trustDomain in lower case (SPIFFE trust domains are lower case)")
		}
	}
	if strict, found, _ := unstructured.NestedBool(obj.Object, "spec", "identityBinding", "strict"); found {
		if strict {
			out.spec.RequireSignature = ptr.To(true)
			l.Used(P("spec", "identityBinding", "strict"), "spec.requireSignature: true: the card is Ready (and netpol's policy permissive) only with a verified signature bound to the workload's identity")
		} else {
			l.NotMigrated(P("spec", "identityBinding", "strict"), reasonAuditBinding)
		}
	}
	if out.spec.TargetRef != nil && out.spec.TargetRef.APIVersion == "" {
		out.spec.TargetRef.Default()
	}
	return nil
}
