package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/intern"
	"github.com/kagenti/platform/pkg/duck/kit"
)

// CacheOptions is what the manager caches for agentcard, watching namespaces (all when empty):
// every object without managedFields (server-side apply does not need them here) and the built-in
// workloads trimmed to their metadata, selector and pod template labels (all that target
// resolution and auto-creation read). Pods are not in it: kit.SlimPods keeps them as the
// small pod type. main and the envtest suite use it, so the tests run the controller on the caches the
// binary has.
func CacheOptions(namespaces map[string]cache.Config) cache.Options {
	return cache.Options{
		DefaultNamespaces: namespaces,
		DefaultTransform:  cache.TransformStripManagedFields(),
		ByObject:          byObject(),
	}
}

// byObject: the workloads trimmed, and AgentCards whose status.card shares its bytes with every
// other holder of the same card (intern.Bytes).
func byObject() map[client.Object]cache.ByObject {
	by := kit.TrimmedWorkloads(templateLabelsOnly)
	by[&v1alpha1.AgentCard{}] = cache.ByObject{Transform: shareCard}
	return by
}

// shareCard is the cache's transform of an AgentCard: managedFields stripped (as DefaultTransform
// does for the other kinds, which a ByObject transform replaces), status.card's bytes shared and
// the rest of the status compacted (compactStatus).
func shareCard(o any) (any, error) {
	o, err := cache.TransformStripManagedFields()(o)
	if err != nil {
		return o, err
	}
	if c, ok := o.(*v1alpha1.AgentCard); ok {
		if c.Status.Card != nil {
			c.Status.Card.Raw = intern.Bytes(c.Status.Card.Raw)
		}
		compactStatus(&c.Status)
	}
	return o, nil
}

// compactStatus makes a decoded status hold what it says and no more: the strings that repeat
// across AgentCards and pod entries (condition types, statuses, reasons and messages, the card
// hash every entry repeats, fetch results, the signer's identity) interned, and the lists at
// their length (the JSON decoder grows them by doubling: 6 conditions take the room of 8).
// Strings unique to one object (names, IPs, URLs, fetch errors) are left alone: interning them
// would cost an entry each and share nothing.
func compactStatus(st *v1alpha1.AgentCardStatus) {
	if len(st.Conditions) > 0 {
		conds := make([]metav1.Condition, len(st.Conditions))
		for i, c := range st.Conditions {
			c.Type, c.Status, c.Reason, c.Message = intern.String(c.Type), metav1.ConditionStatus(intern.String(string(c.Status))), intern.String(c.Reason), intern.String(c.Message)
			conds[i] = c
		}
		st.Conditions = conds
	}
	st.Phase, st.CardHash = intern.String(st.Phase), intern.String(st.CardHash)
	if len(st.Cards) > 0 {
		cards := make([]v1alpha1.PodCard, len(st.Cards))
		for i, e := range st.Cards {
			e.FetchStatus, e.CardHash = intern.String(e.FetchStatus), intern.String(e.CardHash) // an error names its pod: not repeated
			cards[i] = e
		}
		st.Cards = cards
	}
	if s := st.Signature; s != nil {
		s.KeyID, s.SpiffeID, s.Algorithm, s.Reason, s.Message = intern.String(s.KeyID), intern.String(s.SpiffeID), intern.String(s.Algorithm), intern.String(s.Reason), intern.String(s.Message)
	}
	if b := st.Binding; b != nil {
		b.ExpectedSpiffeID, b.Reason, b.Message = intern.String(b.ExpectedSpiffeID), intern.String(b.Reason), intern.String(b.Message)
	}
}

// ClientOptions make unstructured reads (the workloads, through pkg/duck) come from the cache.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{Unstructured: true}}
}

// templateLabelsOnly is the part of a workload's pod template agentcard reads (a CronJob's pods
// are selected by its template labels).
func templateLabelsOnly(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: t.Labels}}
}
