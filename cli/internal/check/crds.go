package check

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kagenti/platform/cli/internal/kube"
)

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// crds checks the CRD of every expected pillar: installed, established, serving the version this
// command speaks.
func (r *runner) crds(ctx context.Context) {
	for _, name := range AllPillars {
		p := pillars[name]
		if !r.opts.expects(name) || p.crd == "" {
			continue
		}
		subject := "CRD " + p.crd
		fix := fmt.Sprintf("kubectl apply --server-side -k deploy/crds/%s (or reinstall: kubectl apply -k deploy/kustomize/overlays/all, helm upgrade --install)", name)
		u, err := r.c.Get(ctx, crdGVK, "", p.crd)
		if apierrors.IsNotFound(err) {
			r.fail(subject, fix, "not installed: %s objects cannot be created and kagenti-%s has nothing to watch", p.gvk.Kind, name)
			continue
		}
		if err != nil {
			r.fail(subject, "check your access to customresourcedefinitions (kubectl auth can-i get crd)", "cannot read it: %v", err)
			continue
		}
		if est := kube.FindCondition(kube.Conditions(u), "Established"); est == nil || est.Status != "True" {
			msg := "not reported"
			if est != nil {
				msg = est.Reason + ": " + est.Message
			}
			r.fail(subject, "kubectl describe crd "+p.crd, "not established (%s)", msg)
			continue
		}
		served, storage := crdVersions(u)
		if !contains(served, p.gvk.Version) {
			r.fail(subject, fix, "does not serve %s, the version this kagenti speaks (it serves %s)", p.gvk.Version, strings.Join(served, ", "))
			continue
		}
		r.crdOK = append(r.crdOK, name)
		r.pass(subject, "established, serves %s (storage %s)", strings.Join(served, ", "), storage)
	}
}

func crdVersions(u *unstructured.Unstructured) (served []string, storage string) {
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		if s, _ := m["served"].(bool); s {
			served = append(served, name)
		}
		if s, _ := m["storage"].(bool); s {
			storage = name
		}
	}
	return served, storage
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
