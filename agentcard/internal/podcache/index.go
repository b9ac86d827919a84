package podcache

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
)

// LabelIndex indexes the cached pods by their labels ("key=value"): a sync lists the pods of one
// equality requirement of its selector, not every pod of the namespace (with 10,000 AgentCards in
// one namespace, scanning it on every sync took most of the controller's CPU). Labels no sync
// looks its pods up by (unindexedPodLabels) are left out.
const LabelIndex = "kagenti.io/pod-label"

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

// IndexValues are a pod's labels as LabelIndex keeps them ("key=value").
func IndexValues(o client.Object) []string {
	out := make([]string, 0, len(o.GetLabels()))
	for k, v := range o.GetLabels() {
		if !unindexedPodLabels[k] {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// indexedRequirement returns a "key=value" of LabelIndex that every pod sel matches carries
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
