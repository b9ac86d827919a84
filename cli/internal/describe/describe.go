// Package describe gathers everything Kagenti did to one workload: the injection (or why there is
// none), the pillar CRs that target it with their conditions, the ConfigMaps they wrote and whether
// the pods mount them, its AgentCard, its NetworkPolicy and its last AgentBuild.
package describe

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kagenti/platform/cli/internal/kube"
	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
)

// Labels, annotations and names of the contract (docs/architecture.md §4, §5).
const (
	LabelInjection            = "kagenti.io/injection"
	LabelInject               = "kagenti.io/inject"
	LabelType                 = "kagenti.io/type"
	LabelSignatureVerified    = "kagenti.io/signature-verified"
	LabelExport               = "kagenti.io/export"
	AnnotationInjectionStatus = "kagenti.io/injection-status"
	AnnotationPolicy          = "kagenti.io/policy"
	AnnotationVerification    = "kagenti.io/verification"
	WebhookName               = "inject.kagenti.io"
	Group                     = "kagenti.io"
)

// Report is what describe prints; -o json and -o yaml print it as is.
type Report struct {
	Workload      Workload    `json:"workload"`
	Injection     Injection   `json:"injection"`
	Pods          []Pod       `json:"pods"`
	Resources     []Resource  `json:"resources"`
	ConfigMaps    []ConfigMap `json:"configMaps"`
	AgentCards    []Card      `json:"agentCards,omitempty"`
	NetworkPolicy []Policy    `json:"networkPolicies,omitempty"`
	Build         *Build      `json:"build,omitempty"`
	// Authorization is the inbound policy of the TokenExchange targeting the workload.
	Authorization *Authorization `json:"authorization,omitempty"`
	// Egress is the outbound allow-list in effect (spec.outbound.egress); nil without one.
	Egress *Egress `json:"egress,omitempty"`
	// Graph is who called the workload, through which chain, as its pods counted.
	Graph *Graph    `json:"delegationGraph,omitempty"`
	now   time.Time // for ages in the text form
}

// Workload is the described workload.
type Workload struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Namespace  string            `json:"namespace"`
	Name       string            `json:"name"`
	Labels     map[string]string `json:"kagentiLabels,omitempty"`
	Ready      string            `json:"ready"`
}

// InjectedContainer is an injected container and the components it runs: its own name, or the
// roles of the combined authbridge container.
type InjectedContainer struct {
	Name       string   `json:"name"`
	Components []string `json:"components"`
}

// Injection says whether the pod template is injected, with what, and if not, why.
type Injection struct {
	Injected   bool     `json:"injected"`
	Components []string `json:"components,omitempty"`
	// Containers are the injected containers and the components each runs.
	Containers []InjectedContainer `json:"containers,omitempty"`
	Status     map[string]any      `json:"status,omitempty"`
	// NotInjectedBecause lists every reason the injector does not act on the workload.
	NotInjectedBecause []string `json:"notInjectedBecause,omitempty"`
	PodsInjected       int      `json:"podsInjected"`
}

// Pod is one pod of the workload.
type Pod struct {
	Name              string `json:"name"`
	Phase             string `json:"phase"`
	Ready             bool   `json:"ready"`
	Restarts          int32  `json:"restarts"`
	Injected          bool   `json:"injected"`
	SignatureVerified string `json:"signatureVerified,omitempty"`
}

// Resource is a Kagenti CR that targets the workload, with its conditions (read by type, whatever
// the pillar reports).
type Resource struct {
	Kind       string           `json:"kind"`
	Name       string           `json:"name"`
	Phase      string           `json:"phase,omitempty"`
	Conditions []kube.Condition `json:"conditions,omitempty"`
	// Stale: the status describes an older generation of the spec.
	Stale bool `json:"stale,omitempty"`
}

// ConfigMap is a ConfigMap a pillar writes for the workload.
type ConfigMap struct {
	Name        string `json:"name"`
	Writer      string `json:"writer"` // the pillar that writes it
	Exists      bool   `json:"exists"`
	Owner       string `json:"owner,omitempty"`
	ContentHash string `json:"contentHash,omitempty"`
	Written     string `json:"written,omitempty"`
	MountedBy   int    `json:"mountedByPods"`
	Pods        int    `json:"pods"`
	// Current: every mounting pod has had time to receive the current content (kubelet refreshes
	// mounted ConfigMaps within about a minute of a change).
	Current bool `json:"current"`
}

// Card is an AgentCard of the workload.
type Card struct {
	Name             string          `json:"name"`
	Ready            *kube.Condition `json:"ready,omitempty"`
	Agent            string          `json:"agent,omitempty"`
	Version          string          `json:"version,omitempty"`
	Verified         bool            `json:"verified"`
	SignatureReason  string          `json:"signatureReason,omitempty"`
	SpiffeID         string          `json:"spiffeID,omitempty"`
	Bound            bool            `json:"bound"`
	BindingReason    string          `json:"bindingReason,omitempty"`
	ExpectedSpiffeID string          `json:"expectedSpiffeID,omitempty"`
	Skills           []string        `json:"skills,omitempty"`
	DiscoveredPods   int64           `json:"discoveredPods"`
	// Exported: labelled kagenti.io/export=true, so a federation member streams it to its hub.
	Exported bool `json:"exported,omitempty"`
}

// Policy is the NetworkPolicy netpol wrote for an AgentCard of the workload.
type Policy struct {
	Name         string `json:"name"`
	Exists       bool   `json:"exists"`
	Kind         string `json:"kind,omitempty"` // permissive or restrictive
	Verification string `json:"verification,omitempty"`
}

// Build is the last AgentBuild that deploys into the workload.
type Build struct {
	Name          string          `json:"name"`
	Phase         string          `json:"phase,omitempty"`
	Ready         *kube.Condition `json:"ready,omitempty"`
	Image         string          `json:"builtImage,omitempty"`
	LastBuildTime string          `json:"lastBuildTime,omitempty"`
}

// Gather reads everything about one workload.
func Gather(ctx context.Context, c *kube.Clients, gvk schema.GroupVersionKind, namespace, name string) (*Report, error) {
	obj, err := c.Get(ctx, gvk, namespace, name)
	if err != nil {
		return nil, err
	}
	w, err := duck.NewWorkload(obj)
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", gvk.Kind, namespace, name, err)
	}
	r := &Report{now: time.Now()}
	r.Workload = Workload{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: namespace, Name: name, Labels: kagentiLabels(obj.GetLabels())}
	rd := w.Readiness()
	r.Workload.Ready = readiness(rd)

	tmpl, err := w.PodTemplate()
	if err != nil {
		return nil, err
	}
	pods, err := workloadPods(ctx, c, w)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		r.Pods = append(r.Pods, podOf(p))
	}
	if err := r.injection(ctx, c, obj, tmpl); err != nil {
		return nil, err
	}
	resources, err := targeting(ctx, c, w, tmpl)
	if err != nil {
		return nil, err
	}
	for _, u := range resources {
		r.add(u, name, pods)
	}
	sort.SliceStable(r.Resources, func(i, j int) bool {
		return r.Resources[i].Kind+r.Resources[i].Name < r.Resources[j].Kind+r.Resources[j].Name
	})
	if err := r.configMaps(ctx, c, namespace, name, pods); err != nil {
		return nil, err
	}
	if err := r.policies(ctx, c, namespace); err != nil {
		return nil, err
	}
	if r.Injection.Injected {
		r.Graph = delegationGraph(ctx, c, pods)
	}
	return r, nil
}

func readiness(rd duck.Readiness) string {
	if rd.Message != "" {
		return rd.Message
	}
	if rd.Ready {
		return "ready"
	}
	return "not ready"
}

func kagentiLabels(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		if strings.HasPrefix(k, "kagenti.io/") {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func workloadPods(ctx context.Context, c *kube.Clients, w *duck.Workload) ([]corev1.Pod, error) {
	sel, err := w.Selector()
	if err != nil || sel.Empty() {
		return nil, err
	}
	list, err := c.Kube.CoreV1().Pods(w.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	pods := list.Items
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods, nil
}

func podOf(p corev1.Pod) Pod {
	out := Pod{Name: p.Name, Phase: string(p.Status.Phase), SignatureVerified: p.Labels[LabelSignatureVerified]}
	_, out.Injected = p.Annotations[AnnotationInjectionStatus]
	for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		out.Restarts += cs.RestartCount
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			out.Ready = cond.Status == corev1.ConditionTrue
		}
	}
	return out
}

func (r *Report) injection(ctx context.Context, c *kube.Clients, obj *unstructured.Unstructured, tmpl *corev1.PodTemplateSpec) error {
	for _, p := range r.Pods {
		if p.Injected {
			r.Injection.PodsInjected++
		}
	}
	if raw, ok := tmpl.Annotations[AnnotationInjectionStatus]; ok {
		r.Injection.Injected = true
		r.Injection.Status, r.Injection.Components, r.Injection.Containers = injectedComponents(raw, tmpl)
		return nil
	}
	var why []string
	ns, err := c.Kube.CoreV1().Namespaces().Get(ctx, obj.GetNamespace(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	if v := ns.Labels[LabelInjection]; v != "enabled" && v != "true" {
		why = append(why, fmt.Sprintf("namespace %s is not labelled %s=enabled (kubectl label namespace %s %s=enabled)", ns.Name, LabelInjection, ns.Name, LabelInjection))
	}
	if ns.Name == "kube-system" || ns.Labels["kagenti.io/system"] == "true" {
		why = append(why, fmt.Sprintf("the injector never acts in namespace %s", ns.Name))
	}
	switch v, ok := obj.GetLabels()[LabelInject]; {
	case !ok:
		why = append(why, fmt.Sprintf("the workload is not labelled %s=enabled", LabelInject))
	case v != "enabled":
		why = append(why, fmt.Sprintf("the workload is labelled %s=%s", LabelInject, v))
	}
	registered, err := webhookRegistered(ctx, c)
	if err != nil {
		return err
	}
	if !registered {
		why = append(why, fmt.Sprintf("the injector's webhook %s is not registered (no MutatingWebhookConfiguration has it): is the injector installed? (kagenti check)", WebhookName))
	}
	if len(why) == 0 {
		if obj.GetKind() == "Job" {
			why = append(why, "a Job's pod template cannot change after creation: this Job was created before injection applied to it")
		} else {
			why = append(why, fmt.Sprintf("its pod template has not been admitted since injection applies to it: the next update injects it (kubectl rollout restart %s/%s)", strings.ToLower(obj.GetKind()), obj.GetName()))
		}
	}
	r.Injection.NotInjectedBecause = why
	return nil
}

func webhookRegistered(ctx context.Context, c *kube.Clients) (bool, error) {
	list, err := c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	for _, cfg := range list.Items {
		for _, wh := range cfg.Webhooks {
			if wh.Name == WebhookName {
				return true, nil
			}
		}
	}
	return false, nil
}

// targeting lists the kagenti.io objects of the namespace that point at the workload: any kind of the
// group (so new pillar kinds show up too) whose spec.targetRef or spec.deployTo.targetRef names it,
// and AgentCards whose selector matches its pods.
func targeting(ctx context.Context, c *kube.Clients, w *duck.Workload, tmpl *corev1.PodTemplateSpec) ([]*unstructured.Unstructured, error) {
	kinds, err := GroupKinds(c)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, gvk := range kinds {
		items, err := c.List(ctx, gvk, w.Namespace(), metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		for i := range items {
			if targets(&items[i], w, tmpl) {
				out = append(out, &items[i])
			}
		}
	}
	return out, nil
}

// GroupKinds are the kinds the cluster serves in the kagenti.io group (preferred version).
func GroupKinds(c *kube.Clients) ([]schema.GroupVersionKind, error) {
	groups, err := c.Discovery.ServerGroups()
	if err != nil {
		return nil, err
	}
	var out []schema.GroupVersionKind
	for _, g := range groups.Groups {
		if g.Name != Group {
			continue
		}
		res, err := c.Discovery.ServerResourcesForGroupVersion(g.PreferredVersion.GroupVersion)
		if err != nil {
			return nil, err
		}
		gv, _ := schema.ParseGroupVersion(g.PreferredVersion.GroupVersion)
		for _, r := range res.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			out = append(out, gv.WithKind(r.Kind))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out, nil
}

func targets(u *unstructured.Unstructured, w *duck.Workload, tmpl *corev1.PodTemplateSpec) bool {
	for _, path := range [][]string{{"spec", "targetRef"}, {"spec", "deployTo", "targetRef"}} {
		ref, found, _ := unstructured.NestedMap(u.Object, path...)
		if !found {
			continue
		}
		t := duck.TargetRef{}
		t.Kind, _ = ref["kind"].(string)
		t.Name, _ = ref["name"].(string)
		t.APIVersion, _ = ref["apiVersion"].(string)
		gvk, err := t.GroupVersionKind()
		if err == nil && t.Name == w.Name() && gvk.GroupKind() == w.GroupVersionKind().GroupKind() {
			return true
		}
	}
	if sel, found, _ := unstructured.NestedMap(u.Object, "spec", "selector"); found && u.GetKind() == "AgentCard" {
		var ls metav1.LabelSelector
		raw, _ := json.Marshal(sel)
		if json.Unmarshal(raw, &ls) == nil {
			s, err := metav1.LabelSelectorAsSelector(&ls)
			if err == nil && !s.Empty() && s.Matches(labels.Set(tmpl.Labels)) {
				return true
			}
		}
	}
	return false
}

// add files one targeting object under its kind.
func (r *Report) add(u *unstructured.Unstructured, workload string, pods []corev1.Pod) {
	res := Resource{Kind: u.GetKind(), Name: u.GetName(), Conditions: kube.Conditions(u)}
	res.Phase, _, _ = unstructured.NestedString(u.Object, "status", "phase")
	if og, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); found && og < u.GetGeneration() {
		res.Stale = true
	}
	r.Resources = append(r.Resources, res)
	switch u.GetKind() {
	case "AgentCard":
		r.AgentCards = append(r.AgentCards, cardOf(u, res.Conditions))
		policy := configmap.AgentPolicyName(workload)
		if _, found, _ := unstructured.NestedMap(u.Object, "spec", "targetRef"); !found {
			policy = configmap.AgentPolicyName(u.GetName())
		}
		r.NetworkPolicy = append(r.NetworkPolicy, Policy{Name: policy})
	case "TokenExchange":
		if a := authorizationOf(u); a != nil {
			r.Authorization = a
		}
		if e := egressOf(u); e != nil {
			r.Egress = e
		}
	case "AgentBuild":
		b := &Build{Name: u.GetName(), Phase: res.Phase, Ready: kube.FindCondition(res.Conditions, "Ready")}
		b.Image, _, _ = unstructured.NestedString(u.Object, "status", "builtImage")
		b.LastBuildTime, _, _ = unstructured.NestedString(u.Object, "status", "lastBuildTime")
		if r.Build == nil || b.LastBuildTime > r.Build.LastBuildTime {
			r.Build = b
		}
	}
}

func cardOf(u *unstructured.Unstructured, conds []kube.Condition) Card {
	c := Card{Name: u.GetName(), Ready: kube.FindCondition(conds, "Ready"), Exported: u.GetLabels()[LabelExport] == "true"}
	c.Agent, _, _ = unstructured.NestedString(u.Object, "status", "card", "name")
	c.Version, _, _ = unstructured.NestedString(u.Object, "status", "card", "version")
	c.Verified, _, _ = unstructured.NestedBool(u.Object, "status", "signature", "verified")
	c.SignatureReason, _, _ = unstructured.NestedString(u.Object, "status", "signature", "reason")
	c.SpiffeID, _, _ = unstructured.NestedString(u.Object, "status", "signature", "spiffeID")
	c.Bound, _, _ = unstructured.NestedBool(u.Object, "status", "binding", "bound")
	c.BindingReason, _, _ = unstructured.NestedString(u.Object, "status", "binding", "reason")
	c.ExpectedSpiffeID, _, _ = unstructured.NestedString(u.Object, "status", "binding", "expectedSpiffeID")
	c.DiscoveredPods, _, _ = unstructured.NestedInt64(u.Object, "status", "discoveredPods")
	skills, _, _ := unstructured.NestedSlice(u.Object, "status", "card", "skills")
	for _, s := range skills {
		m, _ := s.(map[string]any)
		id, _ := m["id"].(string)
		if id == "" {
			id, _ = m["name"].(string)
		}
		if id != "" {
			c.Skills = append(c.Skills, id)
		}
	}
	return c
}

// kubeletSync is how long kubelet may take to deliver a changed ConfigMap to a mounting pod (its
// sync period plus the ConfigMap cache's time to live).
const kubeletSync = 90 * time.Second

func (r *Report) configMaps(ctx context.Context, c *kube.Clients, ns, workload string, pods []corev1.Pod) error {
	for _, cm := range []struct{ name, writer string }{
		{configmap.TokenExchangeName(workload), "tokenexchange"},
		{configmap.TraceName(workload), "agenttrace"},
	} {
		info := ConfigMap{Name: cm.name, Writer: cm.writer, Pods: len(pods)}
		for _, p := range pods {
			if mountsConfigMap(&p.Spec, cm.name) {
				info.MountedBy++
			}
		}
		got, err := c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, cm.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return err
		default:
			info.Exists = true
			info.ContentHash = got.Annotations[contract.ContentHashAnnotation]
			for _, o := range got.OwnerReferences {
				info.Owner = o.Kind + "/" + o.Name
			}
			var last time.Time
			for _, mf := range got.ManagedFields {
				if mf.Time != nil && mf.Time.After(last) {
					last = mf.Time.Time
				}
			}
			if last.IsZero() {
				last = got.CreationTimestamp.Time
			}
			info.Written = last.UTC().Format(time.RFC3339)
			info.Current = r.now.Sub(last) >= kubeletSync
		}
		r.ConfigMaps = append(r.ConfigMaps, info)
	}
	return nil
}

// mountsConfigMap reports whether a volume of spec holds ConfigMap name: a ConfigMap volume (the
// trace ConfigMap; the token-exchange one up to injection v3), or a projected volume with it among
// its sources (the token-exchange ConfigMap in the identity volume since v4).
func mountsConfigMap(spec *corev1.PodSpec, name string) bool {
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == name {
			return true
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil && src.ConfigMap.Name == name {
					return true
				}
			}
		}
	}
	return false
}

func (r *Report) policies(ctx context.Context, c *kube.Clients, ns string) error {
	for i := range r.NetworkPolicy {
		p := &r.NetworkPolicy[i]
		got, err := c.Kube.NetworkingV1().NetworkPolicies(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		p.Exists = true
		p.Kind = got.Annotations[AnnotationPolicy]
		p.Verification = got.Annotations[AnnotationVerification]
	}
	return nil
}

// injectedComponents parses the injection status annotation raw of tmpl and returns it with the
// components the injector added, in the template's order, and the containers that run them. A v1
// status lists the containers; a v2, v3 or v4 status lists only the names the template had of its own
// (kept), so the injected containers are the template's containers with a name of that version
// that is not kept (docs/injector.md, "The status annotation"). Since v3 one container,
// authbridge, runs client-registration, auth-proxy and envoy-proxy (contract.ComponentsOfContainer
// reads them from its arguments); v4 injects the same containers. An annotation that does not
// parse yields nothing.
func injectedComponents(raw string, tmpl *corev1.PodTemplateSpec) (map[string]any, []string, []InjectedContainer) {
	var st map[string]any
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return nil, nil, nil
	}
	list := func(key string) []string {
		var out []string
		if l, ok := st[key].([]any); ok {
			for _, n := range l {
				out = append(out, fmt.Sprint(n))
			}
		}
		return out
	}
	var injected func(name string) bool
	switch st["version"] {
	case "v1":
		names := append(list("initContainers"), list("containers")...)
		injected = func(name string) bool { return slices.Contains(names, name) }
	case "v2":
		kept := list("kept")
		injected = func(name string) bool {
			return slices.Contains(contract.InjectedComponents, name) && !slices.Contains(kept, name)
		}
	default:
		kept := list("kept")
		injected = func(name string) bool {
			return slices.Contains(contract.InjectedContainers, name) && !slices.Contains(kept, name)
		}
	}
	var components []string
	var containers []InjectedContainer
	for _, c := range append(slices.Clone(tmpl.Spec.InitContainers), tmpl.Spec.Containers...) {
		if !injected(c.Name) {
			continue
		}
		runs := contract.ComponentsOfContainer(c.Name, c.Args)
		components = append(components, runs...)
		containers = append(containers, InjectedContainer{Name: c.Name, Components: runs})
	}
	return st, components, containers
}
