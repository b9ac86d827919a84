package inject

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// StatusVersion is the format of the status annotation.
const StatusVersion = "v1"

// Status is the value of the pod template annotation kagenti.io/injection-status: everything the
// injector added, by name, so that re-injection and removal touch nothing of the user's.
type Status struct {
	Version string `json:"version"`
	// Hash identifies the configuration and workload options the template was injected with.
	Hash           string   `json:"hash"`
	InitContainers []string `json:"initContainers,omitempty"`
	Containers     []string `json:"containers,omitempty"`
	Volumes        []string `json:"volumes,omitempty"`
	// VolumeMounts and Env are what was added to each user container, keyed by container name.
	VolumeMounts map[string][]string `json:"volumeMounts,omitempty"`
	Env          map[string][]string `json:"env,omitempty"`
}

// ReadStatus returns the status annotation of t, nil when there is none.
func ReadStatus(t *corev1.PodTemplateSpec) (*Status, error) {
	v, ok := t.Annotations[AnnotationStatus]
	if !ok {
		return nil, nil
	}
	var s Status
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return nil, invalid(AnnotationStatus, v, "not written by this injector (%v); remove the annotation", err)
	}
	if s.Version != StatusVersion {
		return nil, invalid(AnnotationStatus, v, "unknown version %q; accepted: %s", s.Version, StatusVersion)
	}
	return &s, nil
}

// Inject returns t with r merged in; changed is false when t already carries exactly this injection
// (same hash, everything listed still present), in which case t is returned as is. A template
// injected with another configuration or other options is stripped first, then injected afresh.
//
// A user container, init container or volume that has the name of an injected one is kept as the
// user wrote it and the injected one is not added (override by name); likewise a user container that
// already mounts something at the trace path or sets KAGENTI_TRACE_DIR keeps its own.
//
// out shares the injected containers' and volumes' slices, maps and pointers with r (a cached
// rendering serves many admissions, and copying them was a fifth of the handler's time): callers
// must not modify them in out (the webhook only encodes out; Remove and Strip work on a copy).
func Inject(t *corev1.PodTemplateSpec, r *Rendered) (out *corev1.PodTemplateSpec, changed bool, err error) {
	old, err := ReadStatus(t)
	if err != nil {
		return nil, false, err
	}
	if err := checkPorts(t, r); err != nil {
		return nil, false, err
	}
	if old != nil && old.Hash == r.Hash && present(t, old, r) {
		return t, false, nil
	}
	out = t.DeepCopy()
	Strip(out, old)
	st := Status{Version: StatusVersion, Hash: r.Hash}
	spec := &out.Spec

	taken := names(spec.InitContainers, spec.Containers)
	var inits []corev1.Container
	for _, c := range r.InitContainers {
		if !taken[c.Name] {
			inits = append(inits, c)
			st.InitContainers = append(st.InitContainers, c.Name)
		}
	}
	spec.InitContainers = append(inits, spec.InitContainers...)
	for _, c := range r.Containers {
		if !taken[c.Name] {
			spec.Containers = append(spec.Containers, c)
			st.Containers = append(st.Containers, c.Name)
		}
	}
	for _, v := range r.Volumes {
		if !slices.ContainsFunc(spec.Volumes, func(u corev1.Volume) bool { return u.Name == v.Name }) {
			spec.Volumes = append(spec.Volumes, v)
			st.Volumes = append(st.Volumes, v.Name)
		}
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if r.isComponent(c.Name) {
			continue // an injected sidecar, or the user's own version of one (kept as written)
		}
		for _, m := range r.UserMounts {
			if !slices.ContainsFunc(c.VolumeMounts, func(u corev1.VolumeMount) bool { return u.Name == m.Name || u.MountPath == m.MountPath }) {
				c.VolumeMounts = append(c.VolumeMounts, m)
				st.VolumeMounts = appendTo(st.VolumeMounts, c.Name, m.Name)
			}
		}
		for _, e := range r.UserEnv {
			if !slices.ContainsFunc(c.Env, func(u corev1.EnvVar) bool { return u.Name == e.Name }) {
				c.Env = append(c.Env, e)
				st.Env = appendTo(st.Env, c.Name, e.Name)
			}
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, false, fmt.Errorf("encoding injection status: %w", err)
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	if r.IdentityDefaults != "" {
		out.Annotations[AnnotationIdentityDefaults] = r.IdentityDefaults
	}
	out.Annotations[AnnotationStatus] = string(b)
	return out, true, nil
}

// PortConflictError is a user container that declares a port an injected container listens on: both
// would bind it in the pod's one network namespace, and the pod would fail at run time.
type PortConflictError struct {
	// Field is the container's path in the pod template, e.g. spec.containers[0].
	Field     string
	Container string
	Listener  Listener
}

func (e *PortConflictError) Error() string {
	l := e.Listener
	return fmt.Sprintf("%s (%q): port %d/%s is the port the injected %s listens on (%s); use another port, or exclude %s with %s",
		e.Field, e.Container, l.Port.ContainerPort, l.Port.Protocol, l.Component, l.Setting, l.Component, AnnotationExcludeComponents)
}

// checkPorts returns a *PortConflictError for the first user container, init containers first,
// that declares a port of r.Listeners with the same protocol. Containers named after a component
// (injected, or the user's own version of one) are not the user's and are not checked. Only declared
// ports can be checked: a container listening on an undeclared port is not seen.
func checkPorts(t *corev1.PodTemplateSpec, r *Rendered) error {
	if len(r.Listeners) == 0 {
		return nil
	}
	for _, list := range []struct {
		field      string
		containers []corev1.Container
	}{{"spec.initContainers", t.Spec.InitContainers}, {"spec.containers", t.Spec.Containers}} {
		for i, c := range list.containers {
			if r.isComponent(c.Name) {
				continue
			}
			for _, p := range c.Ports {
				for _, l := range r.Listeners {
					if p.ContainerPort == l.Port.ContainerPort && protocol(p) == protocol(l.Port) {
						return &PortConflictError{Field: fmt.Sprintf("%s[%d]", list.field, i), Container: c.Name, Listener: l}
					}
				}
			}
		}
	}
	return nil
}

// protocol is p's protocol, TCP when unset (the API server's default).
func protocol(p corev1.ContainerPort) corev1.Protocol {
	if p.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return p.Protocol
}

// NotInjectable returns why t must not be injected, "" when it may be. A hostNetwork pod shares the
// node's network namespace: proxy-init (NET_ADMIN) would rewrite the node's own packet rules, and the
// sidecars would bind their ports on the node. Istio skips such pods as well.
func NotInjectable(t *corev1.PodTemplateSpec) string {
	if t.Spec.HostNetwork {
		return "the pod template sets hostNetwork: true (proxy-init would rewrite the node's own network rules)"
	}
	return ""
}

// CheckTemplate returns an *InvalidError when t carries a label no pod template may carry, whether
// or not it is to be injected. kagenti.io/signature-verified is written on Pods by agentcard alone,
// after verifying the AgentCard's signature, and NetworkPolicies admit traffic by it: in a template,
// every pod would claim a verification that never happened. Stripping it instead would fight the
// user's manifest (GitOps tools re-apply it) and may break a selector that matches it.
func CheckTemplate(t *corev1.PodTemplateSpec) error {
	if v, ok := t.Labels[LabelSignatureVerified]; ok {
		return invalid(LabelSignatureVerified, v, "only agentcard sets this label, on Pods whose AgentCard signature it verified; remove it from the pod template's labels")
	}
	return nil
}

// Strip removes from t exactly what s lists, and the status annotation itself; nil s removes nothing.
func Strip(t *corev1.PodTemplateSpec, s *Status) {
	if s == nil {
		return
	}
	spec := &t.Spec
	spec.InitContainers = slices.DeleteFunc(spec.InitContainers, func(c corev1.Container) bool { return slices.Contains(s.InitContainers, c.Name) })
	spec.Containers = slices.DeleteFunc(spec.Containers, func(c corev1.Container) bool { return slices.Contains(s.Containers, c.Name) })
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return slices.Contains(s.Volumes, v.Name) })
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if mounts := s.VolumeMounts[c.Name]; len(mounts) > 0 {
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return slices.Contains(mounts, m.Name) })
			if len(c.VolumeMounts) == 0 {
				c.VolumeMounts = nil
			}
		}
		if envs := s.Env[c.Name]; len(envs) > 0 {
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return slices.Contains(envs, e.Name) })
			if len(c.Env) == 0 {
				c.Env = nil
			}
		}
	}
	for _, p := range []*[]corev1.Container{&spec.InitContainers, &spec.Containers} {
		if len(*p) == 0 {
			*p = nil
		}
	}
	if len(spec.Volumes) == 0 {
		spec.Volumes = nil
	}
	delete(t.Annotations, AnnotationStatus)
	delete(t.Annotations, AnnotationIdentityDefaults) // the injector's own key, never the user's
	if len(t.Annotations) == 0 {
		t.Annotations = nil
	}
}

// Remove strips everything the status annotation of t lists; changed is false when t carries none.
func Remove(t *corev1.PodTemplateSpec) (out *corev1.PodTemplateSpec, changed bool, err error) {
	s, err := ReadStatus(t)
	if err != nil || s == nil {
		return t, false, err
	}
	out = t.DeepCopy()
	Strip(out, s)
	return out, true, nil
}

// present reports whether everything s lists is still in t.
func present(t *corev1.PodTemplateSpec, s *Status, r *Rendered) bool {
	if t.Annotations[AnnotationIdentityDefaults] != r.IdentityDefaults {
		return false
	}
	has := names(t.Spec.InitContainers, t.Spec.Containers)
	for _, n := range slices.Concat(s.InitContainers, s.Containers) {
		if !has[n] {
			return false
		}
	}
	for _, n := range s.Volumes {
		if !slices.ContainsFunc(t.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == n }) {
			return false
		}
	}
	for cname, mounts := range s.VolumeMounts {
		i := slices.IndexFunc(t.Spec.Containers, func(c corev1.Container) bool { return c.Name == cname })
		if i < 0 {
			return false
		}
		for _, m := range mounts {
			if !slices.ContainsFunc(t.Spec.Containers[i].VolumeMounts, func(v corev1.VolumeMount) bool { return v.Name == m }) {
				return false
			}
		}
	}
	for cname, envs := range s.Env {
		i := slices.IndexFunc(t.Spec.Containers, func(c corev1.Container) bool { return c.Name == cname })
		if i < 0 {
			return false
		}
		for _, e := range envs {
			if !slices.ContainsFunc(t.Spec.Containers[i].Env, func(v corev1.EnvVar) bool { return v.Name == e }) {
				return false
			}
		}
	}
	// A user container added since the last injection still lacks the trace mount: inject again.
	for _, c := range t.Spec.Containers {
		if r.isComponent(c.Name) {
			continue
		}
		for _, m := range r.UserMounts {
			if !slices.ContainsFunc(c.VolumeMounts, func(u corev1.VolumeMount) bool { return u.Name == m.Name || u.MountPath == m.MountPath }) {
				return false
			}
		}
		for _, e := range r.UserEnv {
			if !slices.ContainsFunc(c.Env, func(u corev1.EnvVar) bool { return u.Name == e.Name }) {
				return false
			}
		}
	}
	return true
}

func names(lists ...[]corev1.Container) map[string]bool {
	m := map[string]bool{}
	for _, l := range lists {
		for _, c := range l {
			m[c.Name] = true
		}
	}
	return m
}

func appendTo(m map[string][]string, k, v string) map[string][]string {
	if m == nil {
		m = map[string][]string{}
	}
	m[k] = append(m[k], v)
	return m
}

// isComponent reports whether name is one of the rendered containers.
func (r *Rendered) isComponent(name string) bool {
	for _, l := range [][]corev1.Container{r.InitContainers, r.Containers} {
		for _, c := range l {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}
