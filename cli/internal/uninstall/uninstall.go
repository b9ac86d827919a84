// Package uninstall removes Kagenti from a cluster without disturbing the workloads: the webhook
// registrations go first (so no create or update is refused while the rest goes away), optionally the
// injected components are stripped by the injector itself, the pillar CRs and CRDs are deleted, and
// netpol's NetworkPolicies are removed before netpol is, so that no traffic stays cut off.
package uninstall

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/cli/internal/apply"
	"github.com/kagenti/platform/cli/internal/kube"
)

// Labels and names of an installation (deploy/kustomize, deploy/helm).
const (
	LabelPartOf        = "app.kubernetes.io/part-of"
	PartOfKagenti      = "kagenti"
	LabelManagedBy     = "app.kubernetes.io/managed-by"
	ManagedByNetpol    = "kagenti-netpol"
	LabelInject        = "kagenti.io/inject"
	AnnotationPolicy   = "kagenti.io/policy"
	AnnotationInjected = "kagenti.io/injection-status"
)

// pillarCRDs are the CRDs the pillars install.
var pillarCRDs = []string{"tokenexchanges.kagenti.io", "agenttraces.kagenti.io", "agentcards.kagenti.io", "federatedclusters.kagenti.io", "agentbuilds.kagenti.io"}

// Options tune an uninstall.
type Options struct {
	// Namespace Kagenti is installed in.
	Namespace string
	// DryRun lists what would change, and changes nothing.
	DryRun bool
	// Uninject strips the injected components from every injected workload first (its pods roll once).
	Uninject bool
	// Timeout bounds each wait (rollouts, deletions).
	Timeout time.Duration
	Out     io.Writer
}

// item is one object a step changes.
type item struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
	note      string
	obj       *unstructured.Unstructured
}

func (i item) String() string {
	s := apply.Ref(i.gvk, i.name)
	if i.namespace != "" {
		s += " -n " + i.namespace
	}
	if i.note != "" {
		s += " (" + i.note + ")"
	}
	return s
}

// step is one stage of the removal; its items are listed by --dry-run and then changed in order.
type step struct {
	title string
	items []item
	// empty is printed when there is nothing to do.
	empty string
	run   func(ctx context.Context) error
}

var (
	crdGVK           = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
	deploymentGVK    = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	mwcGVK           = schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"}
	vwcGVK           = schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"}
	networkPolicyGVK = schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"}
	configMapGVK     = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	namespaceGVK     = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
)

// Run plans the removal, prints it, and (unless DryRun) carries it out step by step.
func Run(ctx context.Context, c *kube.Clients, opts Options) error {
	u := &uninstaller{c: c, opts: opts}
	steps, err := u.plan(ctx)
	if err != nil {
		return err
	}
	mode := ""
	if opts.DryRun {
		mode = " (dry run: nothing is changed)"
	}
	fmt.Fprintf(opts.Out, "Removing Kagenti (namespace %s)%s\n", opts.Namespace, mode)
	for i, s := range steps {
		fmt.Fprintf(opts.Out, "%d. %s\n", i+1, s.title)
		if len(s.items) == 0 {
			fmt.Fprintf(opts.Out, "     %s\n", orDefault(s.empty, "nothing to do"))
			continue
		}
		for _, it := range s.items {
			fmt.Fprintf(opts.Out, "     %s\n", it)
		}
		if opts.DryRun {
			continue
		}
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, s.title, err)
		}
		fmt.Fprintf(opts.Out, "     done\n")
	}
	if opts.DryRun {
		return nil
	}
	fmt.Fprintf(opts.Out, "Kagenti is removed; the workloads kept running.\n")
	return nil
}

type uninstaller struct {
	c    *kube.Clients
	opts Options
}

func (u *uninstaller) plan(ctx context.Context) ([]step, error) {
	var steps []step
	if u.opts.Uninject {
		s, err := u.uninjectStep(ctx)
		if err != nil {
			return nil, err
		}
		steps = append(steps, s)
	}
	hooks, err := u.webhookConfigs(ctx)
	if err != nil {
		return nil, err
	}
	steps = append(steps, step{
		title: "remove the webhook registrations first, so that no create or update is refused while the rest goes away",
		items: hooks, run: func(ctx context.Context) error { return u.deleteAll(ctx, hooks, nil) },
	})
	controllers, netpol, err := u.controllers(ctx)
	if err != nil {
		return nil, err
	}
	steps = append(steps, step{
		title: "stop the controllers that create objects (all but netpol), so that nothing comes back",
		items: controllers, empty: "none deployed in " + u.opts.Namespace + " (controllers running outside the cluster are not stopped by this command)",
		run: func(ctx context.Context) error {
			return u.deleteAll(ctx, controllers, ptr.To(metav1.DeletePropagationForeground))
		},
	})
	crds, crs, kept, err := u.resources(ctx)
	if err != nil {
		return nil, err
	}
	crTitle := "delete the pillar CRs; the ConfigMaps they wrote are kept (owner reference and managed-by label removed), so the injected sidecars keep their configuration"
	if u.opts.Uninject {
		crTitle = "delete the pillar CRs and the ConfigMaps they wrote (no pod mounts them any more)"
	}
	steps = append(steps, step{
		title: crTitle, items: crs,
		run: func(ctx context.Context) error { return u.deleteCRs(ctx, crs, kept) },
	})
	steps = append(steps, step{
		title: "delete the CRDs (this also removes any CR a controller outside the cluster re-created)",
		items: crds,
		run:   func(ctx context.Context) error { return u.deleteAll(ctx, crds, nil) },
	})
	policies, err := u.policies(ctx)
	if err != nil {
		return nil, err
	}
	steps = append(steps, step{
		title: "remove netpol's NetworkPolicies, restrictive first, before netpol goes: no traffic stays cut off",
		items: policies, empty: "none",
		run: func(ctx context.Context) error { return u.deletePolicies(ctx) },
	})
	steps = append(steps, step{
		title: "stop netpol",
		items: netpol, empty: "not deployed in " + u.opts.Namespace,
		run: func(ctx context.Context) error {
			return u.deleteAll(ctx, netpol, ptr.To(metav1.DeletePropagationForeground))
		},
	})
	rest, err := u.rest(ctx)
	if err != nil {
		return nil, err
	}
	steps = append(steps, step{
		title: "delete the rest of the installation (labelled " + LabelPartOf + "=" + PartOfKagenti + ")",
		items: rest, empty: "nothing labelled " + LabelPartOf + "=" + PartOfKagenti,
		run: func(ctx context.Context) error { return u.deleteAll(ctx, rest, nil) },
	})
	if !u.opts.Uninject {
		steps = append(steps, step{
			title: "keep the ConfigMaps the injected sidecars read (delete them once the workloads are uninjected)",
			items: kept, empty: "none", run: func(context.Context) error { return nil },
		})
	}
	return steps, nil
}

// webhookConfigs are the webhook configurations that hold a Kagenti webhook or are labelled as ours.
func (u *uninstaller) webhookConfigs(ctx context.Context) ([]item, error) {
	var out []item
	for _, gvk := range []schema.GroupVersionKind{mwcGVK, vwcGVK} {
		list, err := u.c.List(ctx, gvk, "", metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i := range list {
			cfg := &list[i]
			if cfg.GetLabels()[LabelPartOf] == PartOfKagenti || hasKagentiWebhook(cfg) {
				out = append(out, item{gvk: gvk, name: cfg.GetName(), obj: cfg})
			}
		}
	}
	return out, nil
}

func hasWebhook(cfg *unstructured.Unstructured, name string) bool {
	hooks, _, _ := unstructured.NestedSlice(cfg.Object, "webhooks")
	for _, h := range hooks {
		if m, _ := h.(map[string]any); m["name"] == name {
			return true
		}
	}
	return false
}

func hasKagentiWebhook(cfg *unstructured.Unstructured) bool {
	hooks, _, _ := unstructured.NestedSlice(cfg.Object, "webhooks")
	for _, h := range hooks {
		m, _ := h.(map[string]any)
		if name, _ := m["name"].(string); strings.HasSuffix(name, ".kagenti.io") {
			return true
		}
	}
	return false
}

// controllers are the pillar Deployments of the Kagenti namespace, netpol apart.
func (u *uninstaller) controllers(ctx context.Context) (others, netpol []item, err error) {
	list, err := u.c.List(ctx, deploymentGVK, u.opts.Namespace, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, nil, err
	}
	for i := range list {
		d := &list[i]
		if d.GetLabels()[LabelPartOf] != PartOfKagenti && !strings.HasPrefix(d.GetName(), "kagenti-") {
			continue
		}
		it := item{gvk: deploymentGVK, namespace: d.GetNamespace(), name: d.GetName(), obj: d}
		if d.GetName() == "kagenti-netpol" {
			netpol = append(netpol, it)
		} else {
			others = append(others, it)
		}
	}
	return others, netpol, nil
}

// resources are the pillar CRDs, every object of their kinds, and the ConfigMaps those objects own.
func (u *uninstaller) resources(ctx context.Context) (crds, crs, owned []item, err error) {
	list, err := u.c.List(ctx, crdGVK, "", metav1.ListOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	owners := map[types.UID]string{}
	for i := range list {
		crd := &list[i]
		if !contains(pillarCRDs, crd.GetName()) && crd.GetLabels()[LabelPartOf] != PartOfKagenti {
			continue
		}
		crds = append(crds, item{gvk: crdGVK, name: crd.GetName(), obj: crd})
		gvk, ok := storedKind(crd)
		if !ok {
			continue
		}
		objs, err := u.c.List(ctx, gvk, "", metav1.ListOptions{})
		if err != nil {
			continue // not served (any more): nothing to delete
		}
		for j := range objs {
			o := &objs[j]
			crs = append(crs, item{gvk: gvk, namespace: o.GetNamespace(), name: o.GetName(), obj: o})
			owners[o.GetUID()] = gvk.Kind + "/" + o.GetName()
		}
	}
	cms, err := u.c.List(ctx, configMapGVK, "", metav1.ListOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	for i := range cms {
		cm := &cms[i]
		for _, ref := range cm.GetOwnerReferences() {
			if owner, ok := owners[ref.UID]; ok {
				owned = append(owned, item{gvk: configMapGVK, namespace: cm.GetNamespace(), name: cm.GetName(), note: "written for " + owner, obj: cm})
				break
			}
		}
	}
	return crds, crs, owned, nil
}

func storedKind(crd *unstructured.Unstructured) (schema.GroupVersionKind, bool) {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if served, _ := m["served"].(bool); served {
			name, _ := m["name"].(string)
			return schema.GroupVersionKind{Group: group, Version: name, Kind: kind}, true
		}
	}
	return schema.GroupVersionKind{}, false
}

// policies are netpol's NetworkPolicies, restrictive ones first.
func (u *uninstaller) policies(ctx context.Context) ([]item, error) {
	list, err := u.c.List(ctx, networkPolicyGVK, "", metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedByNetpol})
	if err != nil {
		return nil, err
	}
	var out []item
	for i := range list {
		p := &list[i]
		out = append(out, item{gvk: networkPolicyGVK, namespace: p.GetNamespace(), name: p.GetName(), note: orDefault(p.GetAnnotations()[AnnotationPolicy], "unknown"), obj: p})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].note == "restrictive" && out[j].note != "restrictive" })
	return out, nil
}

// rest is what remains of an installation: everything labelled part-of=kagenti in the Kagenti
// namespace and cluster-wide (RBAC), and the namespace itself when it is labelled so.
func (u *uninstaller) rest(ctx context.Context) ([]item, error) {
	sel := metav1.ListOptions{LabelSelector: LabelPartOf + "=" + PartOfKagenti}
	kinds := []struct {
		gvk        schema.GroupVersionKind
		namespaced bool
	}{
		{schema.GroupVersionKind{Version: "v1", Kind: "Service"}, true},
		{schema.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}, true},
		{schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, true},
		{configMapGVK, true},
		{schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}, true},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}, true},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"}, true},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"}, false},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, false},
		// netpol's and agentcard's admission policies: left behind, they would still refuse
		// label values after the pillars are gone.
		{schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"}, false},
		{schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"}, false},
	}
	var out []item
	for _, k := range kinds {
		ns := ""
		if k.namespaced {
			ns = u.opts.Namespace
		}
		list, err := u.c.List(ctx, k.gvk, ns, sel)
		if err != nil {
			return nil, err
		}
		for i := range list {
			o := &list[i]
			out = append(out, item{gvk: k.gvk, namespace: o.GetNamespace(), name: o.GetName(), obj: o})
		}
	}
	ns, err := u.c.Get(ctx, namespaceGVK, "", u.opts.Namespace)
	if err == nil && ns.GetLabels()[LabelPartOf] == PartOfKagenti {
		out = append(out, item{gvk: namespaceGVK, name: ns.GetName(), obj: ns})
	}
	return out, nil
}

// deleteAll deletes the items (missing ones are fine) and waits until each is gone.
func (u *uninstaller) deleteAll(ctx context.Context, items []item, propagation *metav1.DeletionPropagation) error {
	for _, it := range items {
		ri, _, err := u.c.Resource(it.gvk, it.namespace)
		if err != nil {
			if isGone(err) {
				continue
			}
			return err
		}
		if err := ri.Delete(ctx, it.name, metav1.DeleteOptions{PropagationPolicy: propagation}); err != nil && !isGone(err) {
			return fmt.Errorf("deleting %s: %w", it, err)
		}
	}
	for _, it := range items {
		if err := u.waitGone(ctx, it); err != nil {
			return err
		}
	}
	return nil
}

// waitGone waits until the object is deleted. An object of the same name with another UID is a new
// one (a controller outside the cluster re-created it): the one deleted is gone, and a later step
// (the CRDs' deletion) removes the new one.
func (u *uninstaller) waitGone(ctx context.Context, it item) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, u.opts.Timeout, true, func(ctx context.Context) (bool, error) {
		got, err := u.c.Get(ctx, it.gvk, it.namespace, it.name)
		if isGone(err) {
			return true, nil
		}
		return err == nil && it.obj != nil && got.GetUID() != it.obj.GetUID(), nil
	})
	if err != nil {
		return fmt.Errorf("%s is still there after %s", it, u.opts.Timeout)
	}
	return nil
}

// deleteCRs deletes every pillar CR. Without --uninject the ConfigMaps they wrote are kept for the
// sidecars that read them: their owner references go (so the garbage collector leaves them) and so
// does their managed-by label, without which no controller still running (outside the cluster, or
// from a stale cache) can adopt them back for a CR that is being deleted. They become plain
// ConfigMaps: a pillar installed again reports ConfigMapNotOwned for them until they are deleted.
func (u *uninstaller) deleteCRs(ctx context.Context, crs, owned []item) error {
	if !u.opts.Uninject {
		uids := map[string]bool{}
		for _, cr := range crs {
			uids[string(cr.obj.GetUID())] = true
		}
		for _, cm := range owned {
			live, err := u.c.Get(ctx, cm.gvk, cm.namespace, cm.name)
			if isGone(err) {
				continue
			}
			if err != nil {
				return err
			}
			if _, err := apply.Disown(ctx, u.c, live, uids, LabelManagedBy); err != nil {
				return fmt.Errorf("keeping %s: %w", cm, err)
			}
		}
	}
	return u.deleteAll(ctx, crs, ptr.To(metav1.DeletePropagationBackground))
}

// deletePolicies deletes netpol's policies, restrictive first, until none is left: a controller
// outside the cluster may still have re-created one for a card that is gone by now.
func (u *uninstaller) deletePolicies(ctx context.Context) error {
	var left []item
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, u.opts.Timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if left, err = u.policies(ctx); err != nil {
			return false, err
		}
		if len(left) == 0 {
			return true, nil
		}
		for _, p := range left {
			ri, _, err := u.c.Resource(p.gvk, p.namespace)
			if err != nil {
				return false, err
			}
			if err := ri.Delete(ctx, p.name, metav1.DeleteOptions{}); err != nil && !isGone(err) {
				return false, err
			}
		}
		return false, nil
	})
	if err != nil && len(left) > 0 {
		return fmt.Errorf("%d NetworkPolicies of netpol keep coming back (is kagenti-netpol still running outside the cluster?): %v", len(left), left)
	}
	return err
}

// isGone: the object, or its whole kind (a deleted CRD), no longer exists.
func isGone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsGone(err) || meta.IsNoMatchError(err)
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
