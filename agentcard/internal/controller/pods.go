package controller

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/resources"
	"github.com/kagenti/platform/pkg/duck"
)

// DefaultPort is the card port when the pod names no "a2a" or "http" container port.
const DefaultPort = 8081

// podSelector returns the label selector of the card's pods: the workload's (targetRef mode) or
// spec.selector.
func (r *CardReconciler) podSelector(ctx context.Context, c *v1alpha1.AgentCard) (labels.Selector, error) {
	if c.Spec.TargetRef != nil {
		w, err := r.Resolver.Resolve(ctx, c.Namespace, *c.Spec.TargetRef)
		if err != nil {
			if reason := duck.ReasonOf(err); reason != "" {
				return nil, &resources.SelectorError{Reason: reason, Message: err.Error()}
			}
			return nil, err
		}
		sel, err := w.Selector()
		if err != nil {
			if reason := duck.ReasonOf(err); reason != "" {
				return nil, &resources.SelectorError{Reason: reason, Message: err.Error()}
			}
			return nil, &resources.SelectorError{Reason: duck.ReasonUnsupportedKind, Message: err.Error()}
		}
		return sel, nil
	}
	if c.Spec.Selector == nil {
		return nil, &resources.SelectorError{Reason: v1alpha1.ReasonInvalidSelector, Message: "spec.selector or spec.targetRef is required"}
	}
	sel, err := metav1.LabelSelectorAsSelector(c.Spec.Selector)
	if err != nil {
		return nil, &resources.SelectorError{Reason: v1alpha1.ReasonInvalidSelector, Message: fmt.Sprintf("spec.selector: %v", err)}
	}
	if sel.Empty() {
		return nil, &resources.SelectorError{Reason: v1alpha1.ReasonInvalidSelector, Message: "spec.selector must not be empty (it would select every pod in the namespace)"}
	}
	return sel, nil
}

// PodLabelIndex indexes the cached pods by their labels ("key=value"): a sync lists the pods of one
// equality requirement of its selector, not every pod of the namespace (with 10,000 AgentCards in
// one namespace, scanning it on every sync took most of the controller's CPU). Labels no sync
// looks its pods up by (unindexedPodLabels) are left out.
const PodLabelIndex = "kagenti.io/pod-label"

// unindexedPodLabels are the pod labels the index leaves out: this controller's own verdict, on
// every pod whose card it verified, with one of two values (an index entry listing every such pod,
// which no selector can use: the label is agentcard's output, never what selects an agent's pods), and the
// labels the workload controllers set to a value unique to one pod or one revision, which a
// selector shares with a label the index keeps (a ReplicaSet's pod-template-hash comes with the
// Deployment's labels) or, alone, selects one pod (the namespace scan is then as cheap).
var unindexedPodLabels = map[string]bool{
	v1alpha1.LabelSignatureVerified:            true,
	"pod-template-hash":                        true,
	"controller-revision-hash":                 true,
	"statefulset.kubernetes.io/pod-name":       true,
	"apps.kubernetes.io/pod-index":             true,
	"batch.kubernetes.io/job-completion-index": true,
}

// podIndexValues are a pod's labels as PodLabelIndex keeps them ("key=value").
func podIndexValues(o client.Object) []string {
	out := make([]string, 0, len(o.GetLabels()))
	for k, v := range o.GetLabels() {
		if !unindexedPodLabels[k] {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// indexedRequirement returns a "key=value" of PodLabelIndex that every pod sel matches carries
// (an equality requirement, or an In with one value, on an indexed label), to list them through
// the index; false when sel has none: then the namespace is scanned.
func indexedRequirement(sel labels.Selector) (string, bool) {
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		if unindexedPodLabels[r.Key()] {
			continue
		}
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if vals := r.Values(); vals.Len() == 1 {
				return r.Key() + "=" + vals.UnsortedList()[0], true
			}
		}
	}
	return "", false
}

// selectedPods lists the selected pods by name. Only those serving are fetched; the others
// keep a verdict given while they served (same pod, same IP), so a readiness blip does not take
// the label away. The pods are the cache's own: read-only, their labels above all.
func (r *CardReconciler) selectedPods(namespace string, sel labels.Selector) ([]*pod, error) {
	return selectedPods(r.Pods, namespace, sel)
}

// defaultPaths are the card paths tried when spec.endpoint names none; shared by every pod's sync
// state, never modified.
var defaultPaths = []string{fetch.PathAgentCard, fetch.PathLegacy}

// endpointFor resolves scheme, port and paths for a pod from spec.endpoint and the pod's ports.
func endpointFor(c *v1alpha1.AgentCard, p *pod) (scheme string, port int32, paths []string) {
	scheme, paths = "http", defaultPaths
	if e := c.Spec.Endpoint; e != nil {
		if e.Scheme != "" {
			scheme = e.Scheme
		}
		if e.Path != "" {
			paths = []string{e.Path}
		}
		port = e.Port
	}
	if port == 0 {
		port = p.CardPort
	}
	if port == 0 {
		port = DefaultPort
	}
	return scheme, port, paths
}

// patchVerifiedLabel sets kagenti.io/signature-verified on the pod itself to value, or removes it
// when value is "" (a metadata-only merge patch: no restart, never the workload's template).
func (r *CardReconciler) patchVerifiedLabel(ctx context.Context, p *pod, value string) error {
	v := "null"
	if value != "" {
		v = strconv.Quote(value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, v1alpha1.LabelSignatureVerified, v)
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	err := r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, []byte(patch)))
	return client.IgnoreNotFound(err)
}

// hasLabelValue says whether the cached pod's kagenti.io/signature-verified is value ("": absent).
func hasLabelValue(p *pod, value string) bool {
	v, ok := p.Labels[v1alpha1.LabelSignatureVerified]
	if value == "" {
		return !ok
	}
	return ok && v == value
}
