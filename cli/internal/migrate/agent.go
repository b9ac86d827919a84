package migrate

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// Labels the composition relies on (docs/architecture.md §4).
const (
	LabelInject    = "kagenti.io/inject"
	LabelInjection = "kagenti.io/injection"
	LabelType      = "kagenti.io/type"
	LabelName      = "app.kubernetes.io/name"
)

// What the kagenti-operator's Agent controller added to every Agent's Deployment at run time
// (internal/controller/agent_controller.go, createDeploymentForAgent). Migrating an agent.kagenti.dev
// Agent writes these out, so the migrated Deployment runs the pods the operator ran.
const (
	upstreamDefaultPort    = 8000
	upstreamCacheVolume    = "cache"
	upstreamCacheMountPath = "/app/.cache"
	upstreamUID            = 1000
)

// defaultServicePorts is the default of both legacy Agent CRDs' spec.servicePorts.
func defaultServicePorts() []corev1.ServicePort {
	return []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}
}

// agentParts are the pieces of an Agent's spec, decoded.
type agentParts struct {
	template     corev1.PodTemplateSpec
	templatePath Path // where the pod template's spec is in the Agent
	specShaped   bool // spec.podTemplateSpec holds a PodSpec (the design document's example)
	servicePorts []corev1.ServicePort
	image        string
	buildRef     string
	replicas     int32
}

func (m *migrator) agent(in Input) error {
	obj := in.Object
	name, ns := obj.GetName(), obj.GetNamespace()
	w := m.workload("Deployment", ns, name)
	if w.full != nil {
		return fmt.Errorf("%s: Agent %s would write Deployment %s, which is already among the inputs", in.Source.Where, name, name)
	}
	parts, err := decodeAgent(in)
	if err != nil {
		return err
	}
	l := m.ledger(in)
	upstream := obj.GroupVersionKind().Group == UpstreamGroup
	depRef := "Deployment/" + name
	w.from = append(w.from, in.Source)
	w.apiVersion = "apps/v1"

	// Selector and labels. The kagenti-operator selected its pods by app.kubernetes.io/name plus
	// every label of the Agent; a Deployment's selector is immutable, so an existing one is kept.
	selector := map[string]string{LabelName: name}
	for k, v := range obj.GetLabels() {
		if _, set := selector[k]; !set {
			selector[k] = v
		}
	}
	if live := m.live("Deployment", ns, name); live != nil {
		if sel, found, _ := unstructured.NestedStringMap(live.Object, "spec", "selector", "matchLabels"); found && len(sel) > 0 {
			selector = sel
			w.notes = append(w.notes, "spec.selector: kept the existing Deployment's selector (a selector cannot change)")
		}
	}
	labels := map[string]string{}
	for k, v := range selector {
		labels[k] = v
	}
	for k, v := range obj.GetLabels() {
		labels[k] = v
		l.Copied(P("metadata", "labels", k), depRef, P("metadata", "labels", k))
	}
	specLabels, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "labels")
	for _, k := range sortedKeys(specLabels) {
		if have, set := labels[k]; set && have != specLabels[k] {
			l.NotMigrated(P("spec", "labels", k), fmt.Sprintf("conflicts with the Agent's own label %s=%s, which the Deployment keeps", k, have))
			continue
		}
		labels[k] = specLabels[k]
		l.Copied(P("spec", "labels", k), depRef, P("metadata", "labels", k))
	}
	if v, set := labels[LabelInject]; set && v != "enabled" {
		l.NotMigrated(P("metadata", "labels", LabelInject), "migrate opts the Deployment in to injection (kagenti.io/inject: enabled), which is what the Agent stood for")
		l.NotMigrated(P("spec", "labels", LabelInject), "migrate opts the Deployment in to injection (kagenti.io/inject: enabled), which is what the Agent stood for")
	}
	w.addLabels[LabelInject] = "enabled"
	if _, set := labels[LabelType]; !set {
		w.addLabels[LabelType] = "agent"
	}

	annotations := map[string]string{}
	for k, v := range obj.GetAnnotations() {
		if k == lastApplied {
			continue
		}
		annotations[k] = v
		l.Copied(P("metadata", "annotations", k), depRef, P("metadata", "annotations", k))
	}
	specAnnotations, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "annotations")
	for _, k := range sortedKeys(specAnnotations) {
		if have, set := annotations[k]; set && have != specAnnotations[k] {
			l.NotMigrated(P("spec", "annotations", k), fmt.Sprintf("conflicts with the Agent's own annotation %s, which the Deployment keeps", k))
			continue
		}
		annotations[k] = specAnnotations[k]
		l.Copied(P("spec", "annotations", k), depRef, P("metadata", "annotations", k))
	}
	l.Used(P("metadata", "name"), "names the Deployment, its Service and the pillar CRs made for it")
	l.Used(P("metadata", "namespace"), "namespace of every object made from it")

	// The pod template.
	tmpl := parts.template
	tmplMeta := parts.templatePath[:len(parts.templatePath)-1].Child("metadata")
	if parts.specShaped {
		tmplMeta = nil
		w.notes = append(w.notes, "spec.template.spec: spec.podTemplateSpec holds a pod spec (the design document's shape), taken as the template's spec")
	}
	if tmplMeta != nil {
		l.NotMigrated(tmplMeta.Child("resourceVersion"), "the kagenti-operator cleared it; a pod template has none")
		l.NotMigrated(tmplMeta.Child("uid"), "the kagenti-operator cleared it; a pod template has none")
		tmpl.ResourceVersion, tmpl.UID = "", ""
		for _, k := range sortedKeys(tmpl.Labels) {
			if v, set := selector[k]; set && v != tmpl.Labels[k] {
				l.NotMigrated(tmplMeta.Child("labels", k), fmt.Sprintf("replaced by the selector's %s=%s: pods must carry their Deployment's selector", k, v))
			}
		}
	}
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	for k, v := range selector {
		tmpl.Labels[k] = v
	}
	tmpl.Labels[LabelName] = name

	containers := tmpl.Spec.Containers
	if len(containers) == 0 {
		return fmt.Errorf("%s: Agent %s: %s has no containers", in.Source.Where, name, parts.templatePath.Child("containers"))
	}
	// Images: spec.imageSource.image goes to the first container, an AgentBuild's image to the
	// container named "agent" (else the first), as the kagenti-operator did.
	if parts.image != "" {
		if containers[0].Image != "" && containers[0].Image != parts.image {
			l.NotMigrated(parts.templatePath.Child("containers", Index(0), "image"), "replaced by spec.imageSource.image, as the kagenti-operator did")
		}
		containers[0].Image = parts.image
		l.Copied(P("spec", "imageSource", "image"), depRef, P("spec", "template", "spec", "containers", Index(0), "image"))
	}
	if parts.buildRef != "" {
		if err := m.wireBuild(in, l, w, &tmpl, parts); err != nil {
			return err
		}
	}
	if upstream {
		m.operatorDefaults(l, w, &tmpl, name)
	}
	if tmplMeta != nil {
		l.Copied(tmplMeta, depRef, P("spec", "template", "metadata"))
	}
	l.Copied(parts.templatePath, depRef, P("spec", "template", "spec"))

	replicas := parts.replicas
	l.Copied(P("spec", "replicas"), depRef, P("spec", "replicas"))
	dep := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: nilIfEmpty(annotations)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: tmpl,
		},
	}
	u, err := toUnstructured(dep)
	if err != nil {
		return fmt.Errorf("%s: Agent %s: %w", in.Source.Where, name, err)
	}
	if strategy, _, _ := unstructured.NestedMap(u.Object, "spec", "strategy"); len(strategy) == 0 {
		unstructured.RemoveNestedField(u.Object, "spec", "strategy")
	}
	w.full = u

	// The Service: the Agent's servicePorts, selecting the pods as the kagenti-operator's Service did.
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelName: name}, Annotations: nilIfEmpty(annotations)},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{LabelName: name}, Ports: parts.servicePorts},
	}
	svcObj := &Object{From: []Source{in.Source}}
	if !l.Has(P("spec", "servicePorts")) {
		svcObj.Notes = append(svcObj.Notes, "spec.ports: the legacy CRD's default servicePorts (http, 8080/TCP), which the Agent had")
	}
	l.Copied(P("spec", "servicePorts"), "Service/"+name, P("spec", "ports"))
	if svcObj.Unstructured, err = toUnstructured(svc); err != nil {
		return err
	}
	dropZeroTargetPorts(svcObj.Unstructured)
	w.extras = append(w.extras, svcObj)

	if desc, found, _ := unstructured.NestedString(obj.Object, "spec", "description"); found && desc != "" {
		card := w.cardFor(m, in.Source)
		card.spec.Metadata = orNew(card.spec.Metadata)
		card.spec.Metadata.Description = desc
		l.Copied(P("spec", "description"), "AgentCard/"+card.name, P("spec", "metadata", "description"))
	} else {
		l.Used(P("spec", "description"), "empty")
	}
	m.inboundPorts(l, w, in.Source, &tmpl, parts.servicePorts)
	return nil
}

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

func decodeAgent(in Input) (*agentParts, error) {
	obj := in.Object
	where := fmt.Sprintf("%s: Agent %s", in.Source.Where, obj.GetName())
	raw, found, err := unstructured.NestedMap(obj.Object, "spec", "podTemplateSpec")
	if err != nil || !found {
		return nil, fmt.Errorf("%s: spec.podTemplateSpec is required (the agent's pod)", where)
	}
	parts := &agentParts{replicas: 1}
	// The design document's example puts a pod spec (containers: ...) directly under podTemplateSpec.
	if _, hasContainers := raw["containers"]; hasContainers {
		if _, hasSpec := raw["spec"]; !hasSpec {
			parts.specShaped = true
			raw = map[string]any{"spec": raw}
		}
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &parts.template); err != nil {
		return nil, fmt.Errorf("%s: spec.podTemplateSpec: %w", where, err)
	}
	parts.templatePath = P("spec", "podTemplateSpec", "spec")
	if parts.specShaped {
		parts.templatePath = P("spec", "podTemplateSpec")
	}
	if ports, found, _ := unstructured.NestedSlice(obj.Object, "spec", "servicePorts"); found {
		var wrapper struct {
			Ports []corev1.ServicePort `json:"ports"`
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"ports": ports}, &wrapper); err != nil {
			return nil, fmt.Errorf("%s: spec.servicePorts: %w", where, err)
		}
		parts.servicePorts = wrapper.Ports
	} else {
		parts.servicePorts = defaultServicePorts()
	}
	if len(parts.servicePorts) == 0 {
		return nil, fmt.Errorf("%s: spec.servicePorts is empty: a Service needs at least one port", where)
	}
	parts.image, _, _ = unstructured.NestedString(obj.Object, "spec", "imageSource", "image")
	parts.buildRef, _, _ = unstructured.NestedString(obj.Object, "spec", "imageSource", "buildRef", "name")
	if parts.image == "" && parts.buildRef == "" {
		return nil, fmt.Errorf("%s: spec.imageSource needs image or buildRef.name", where)
	}
	if r, found, err := unstructured.NestedFieldNoCopy(obj.Object, "spec", "replicas"); err == nil && found {
		n, ok := number(r)
		if !ok || n < 0 || n != float64(int32(n)) {
			return nil, fmt.Errorf("%s: spec.replicas: %v is not a replica count", where, r)
		}
		parts.replicas = int32(n)
	}
	return parts, nil
}

// operatorDefaults writes out what the kagenti-operator added to the pod template at run time, so the
// migrated Deployment runs the same pods (and an existing one is adopted without a rollout).
func (m *migrator) operatorDefaults(l *Ledger, w *workload, tmpl *corev1.PodTemplateSpec, name string) {
	spec := &tmpl.Spec
	for i := range spec.Containers {
		if len(spec.Containers[i].Ports) == 0 {
			spec.Containers[i].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: upstreamDefaultPort, Protocol: corev1.ProtocolTCP}}
			w.notes = append(w.notes, fmt.Sprintf("container %s: port http 8000/TCP, which the kagenti-operator gave containers without ports", spec.Containers[i].Name))
		}
	}
	mounted := false
	for _, c := range spec.Containers {
		for _, vm := range c.VolumeMounts {
			mounted = mounted || vm.Name == upstreamCacheVolume
		}
	}
	if !mounted {
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: upstreamCacheVolume, MountPath: upstreamCacheMountPath})
	}
	hasVolume := false
	for _, v := range spec.Volumes {
		hasVolume = hasVolume || v.Name == upstreamCacheVolume
	}
	if !hasVolume {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: upstreamCacheVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	if !mounted || !hasVolume {
		w.notes = append(w.notes, "volume cache (emptyDir) at /app/.cache in the first container, which the kagenti-operator added")
	}
	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = name
		w.notes = append(w.notes, fmt.Sprintf("serviceAccountName %s, with the ServiceAccount, Role and RoleBinding the kagenti-operator created for the Agent", name))
		w.extras = append(w.extras, upstreamRBAC(w.namespace, name, w.from[len(w.from)-1])...)
	}
	if spec.SecurityContext == nil {
		sc := &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
		if m.opts.Distribution != DistributionOpenShift {
			sc.RunAsUser, sc.FSGroup = ptr.To[int64](upstreamUID), ptr.To[int64](upstreamUID)
		}
		spec.SecurityContext = sc
		w.notes = append(w.notes, fmt.Sprintf("pod securityContext the kagenti-operator set on %s", m.opts.Distribution))
	}
	for i := range spec.Containers {
		if spec.Containers[i].SecurityContext == nil {
			spec.Containers[i].SecurityContext = &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Privileged:               ptr.To(false),
				ReadOnlyRootFilesystem:   ptr.To(true),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			}
			w.notes = append(w.notes, fmt.Sprintf("container %s: the securityContext the kagenti-operator set", spec.Containers[i].Name))
		}
	}
}

// upstreamRBAC recreates the ServiceAccount, Role and RoleBinding the kagenti-operator made for an
// Agent (all named after it), so that pods keep their identity and permissions once the Agent (which
// owned them) is gone.
func upstreamRBAC(ns, name string, from Source) []*Object {
	labels := map[string]string{LabelName: name}
	meta := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}
	sa := &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta}
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: meta,
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""},
			Resources: []string{"pods", "pods/log", "configmaps", "secrets"},
			Verbs:     []string{"get", "list", "watch"},
		}},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: meta,
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
	}
	var out []*Object
	for _, o := range []runtime.Object{sa, role, binding} {
		u, err := toUnstructured(o)
		if err != nil {
			panic(err) // static objects of known types always convert
		}
		out = append(out, &Object{Unstructured: u, From: []Source{from}})
	}
	out[0].Notes = []string{"the kagenti-operator created it for the Agent; the Agent's pods run as it"}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func orNew[T any](p *T) *T {
	if p == nil {
		return new(T)
	}
	return p
}

// validImage is a loose check that a container image field holds an image reference rather than a
// placeholder ("<will be replaced ...>").
func validImage(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t<>{}")
}

// dropZeroTargetPorts removes the targetPort: 0 a typed ServicePort writes when none was given
// (the API server defaults it to the port).
func dropZeroTargetPorts(u *unstructured.Unstructured) {
	ports, _, _ := unstructured.NestedSlice(u.Object, "spec", "ports")
	for _, p := range ports {
		if m, ok := p.(map[string]any); ok {
			if n, ok := number(m["targetPort"]); ok && n == 0 {
				delete(m, "targetPort")
			}
		}
	}
	_ = unstructured.SetNestedSlice(u.Object, ports, "spec", "ports")
}
