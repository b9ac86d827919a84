package inject

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/pkg/configmap/appprobe"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

// Versions of the status annotation. The injector writes StatusVersion and reads both, so that
// it strips and re-injects templates an older injector wrote exactly as that one would have.
const (
	// StatusV1 lists every name the injector added (≈ 410 bytes for the default components).
	StatusV1 = "v1"
	// StatusV2 records only the exceptions to "every name of contract.InjectedComponents and
	// contract.InjectedVolumes in the template, and the trace mount and variable of every user
	// container, are the injector's" (≈ 45 bytes for a template without any). The version names the
	// set those names are taken from: a release that injects a new name writes a new version, and
	// reads this one with the set it had.
	StatusV2 = "v2"
	// StatusV3 is StatusV2 over the containers of the combined sidecar: proxy-init, spiffe-helper
	// and authbridge (which runs client-registration, auth-proxy and envoy-proxy). A v2 template
	// is stripped of the five containers of v2 and injected afresh: it is upgraded on its next
	// admission like a template injected with another configuration.
	StatusV3 = "v3"
	// StatusV4 is StatusV3 for the lean injection of issue 15: the identity volume is projected
	// and holds the TokenExchange ConfigMap (no kagenti-token-exchange volume), no KAGENTI_TRACE_DIR
	// variable is added to user containers (so a v4 status records no OwnTraceEnv, and removal
	// leaves every variable alone), proxy-init mounts the shared volume only beside spiffe-helper,
	// the authbridge container has no liveness probe, and POD_NAME is projected only when the
	// hostname is not the pod's name. A v3 template is stripped as v3 and injected afresh.
	StatusV4 = "v4"
	// StatusV5 is StatusV4 with the agent's probes rewritten (issue 27): a probe of a user
	// container that the inbound interception catches becomes a GET on the authbridge container's
	// status port, and the original is recorded in the identity defaults
	// (contract.AppProbesVariable), from which removal restores it. The names are v4's. An injector
	// that knows no v5 refuses to touch the template rather than leave the rewritten probes without
	// their originals; a v4 template is stripped as v4 and injected afresh when it has a probe to
	// rewrite, and left alone otherwise (it is what v5 writes).
	StatusV5 = "v5"
	// StatusVersion is the version this injector writes.
	StatusVersion = StatusV5
)

// InjectedContainers returns the container names a v2 to v5 status records exceptions to:
// the names an injector writing version v may add.
func InjectedContainers(v string) []string {
	if v == StatusV2 {
		return contract.InjectedComponents
	}
	return contract.InjectedContainers
}

// Status is the value of the pod template annotation kagenti.io/injection-status: what the
// injector added, so that re-injection and removal touch nothing of the user's.
type Status struct {
	Version string `json:"version"`
	// Hash identifies what was rendered (renderHash): equal hashes, equal injections.
	Hash string `json:"hash"`

	// v1: every name added.
	InitContainers []string `json:"initContainers,omitempty"`
	Containers     []string `json:"containers,omitempty"`
	Volumes        []string `json:"volumes,omitempty"`
	// VolumeMounts and Env are what was added to each user container, keyed by container name.
	VolumeMounts map[string][]string `json:"volumeMounts,omitempty"`
	Env          map[string][]string `json:"env,omitempty"`

	// v2: the exceptions. Kept lists the containers and volumes with an injected name that the
	// template had before injection (the user's own, by override or because the component was not
	// rendered): kept as written, never stripped. OwnTraceMount and OwnTraceEnv list the user
	// containers that had their own mount named kagenti-trace, or their own KAGENTI_TRACE_DIR:
	// nothing was added to them, and removal keeps theirs. (v4 adds no variable: no OwnTraceEnv.)
	Kept          []string `json:"kept,omitempty"`
	OwnTraceMount []string `json:"ownTraceMount,omitempty"`
	OwnTraceEnv   []string `json:"ownTraceEnv,omitempty"`

	// Proxy mode (v5 and later; absent in transparent mode). Interception is "proxy";
	// ServiceTargetPort names the container port a Service must target (the authbridge
	// container's kagenti-inbound) for its requests to reach the inbound proxy; ProxyEnv lists the
	// user containers given the HTTP proxy variables (proxyEnvNames), which removal deletes.
	Interception      string   `json:"interception,omitempty"`
	ServiceTargetPort string   `json:"serviceTargetPort,omitempty"`
	ProxyEnv          []string `json:"proxyEnv,omitempty"`
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
	switch s.Version {
	case StatusV1, StatusV2, StatusV3, StatusV4, StatusV5:
	default:
		return nil, invalid(AnnotationStatus, v, "unknown version %q; accepted: %s, %s, %s, %s, %s", s.Version, StatusV1, StatusV2, StatusV3, StatusV4, StatusV5)
	}
	return &s, nil
}

// Inject returns t with r merged in; changed is false when t already carries exactly this injection
// (same hash, everything listed still present), in which case t is returned as is. A template
// injected with another configuration or other options is stripped first, then injected afresh.
//
// A user container, init container or volume that has the name of an injected one is kept as the
// user wrote it and the injected one is not added (override by name); likewise a user container that
// already mounts something at the trace path keeps its own.
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
	if err := checkProxyIdentity(t, r, old); err != nil {
		return nil, false, err
	}
	if err := checkProxyEnv(t, r, old); err != nil {
		return nil, false, err
	}
	if old != nil && old.Hash == r.Hash && present(t, old, r) {
		return t, false, nil
	}
	out = t.DeepCopy()
	Strip(out, old)
	st := Status{Version: StatusVersion, Hash: r.Hash}
	if r.Interception == config.InterceptionProxy {
		st.Interception, st.ServiceTargetPort = r.Interception, r.ServiceTargetPort
	}
	spec := &out.Spec

	taken := names(spec.InitContainers, spec.Containers)
	for _, n := range InjectedContainers(StatusVersion) {
		if taken[n] {
			st.Kept = append(st.Kept, n)
		}
	}
	for _, n := range contract.InjectedVolumes {
		if slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == n }) {
			st.Kept = append(st.Kept, n)
		}
	}
	// Each list grows once, to its final length at most: the elements are large (a Container is
	// about a kilobyte) and growing by appending copied them several times per admission.
	inits := make([]corev1.Container, 0, len(r.InitContainers)+len(spec.InitContainers))
	for _, c := range r.InitContainers {
		if !taken[c.Name] {
			inits = append(inits, c)
		}
	}
	if spec.InitContainers = append(inits, spec.InitContainers...); len(spec.InitContainers) == 0 {
		spec.InitContainers = nil
	}
	// Strip removes the trace mount by name from every container it keeps: a container of the
	// template that has one of its own is recorded (the user's version of a component too),
	// whether or not it is added. Only the template's: an injected authbridge container (classic
	// mode appends it below) mounts the trace volume too, and goes with the rest on removal.
	for _, c := range spec.Containers {
		if slices.ContainsFunc(c.VolumeMounts, func(u corev1.VolumeMount) bool { return u.Name == VolumeTrace }) {
			st.OwnTraceMount = append(st.OwnTraceMount, c.Name)
		}
	}
	spec.Containers = slices.Grow(spec.Containers, len(r.Containers))
	for _, c := range r.Containers {
		if !taken[c.Name] {
			spec.Containers = append(spec.Containers, c)
		}
	}
	spec.Volumes = slices.Grow(spec.Volumes, len(r.Volumes))
	for _, v := range r.Volumes {
		if !slices.ContainsFunc(spec.Volumes, func(u corev1.Volume) bool { return u.Name == v.Name }) {
			spec.Volumes = append(spec.Volumes, v)
		}
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if r.isComponent(c.Name) {
			continue // an injected sidecar, or the user's own version of one (kept as written)
		}
		if r.UserEnv != nil {
			c.Env = append(slices.Clip(c.Env), r.UserEnv...)
			st.ProxyEnv = append(st.ProxyEnv, c.Name)
		}
		c.VolumeMounts = slices.Grow(c.VolumeMounts, len(r.UserMounts))
		for _, m := range r.UserMounts {
			if !slices.ContainsFunc(c.VolumeMounts, func(u corev1.VolumeMount) bool { return u.Name == m.Name || u.MountPath == m.MountPath }) {
				c.VolumeMounts = append(c.VolumeMounts, m)
			}
		}
	}
	defaults := r.IdentityDefaults
	if r.appProbes != nil && !taken[contract.ContainerAuthbridge] {
		// Only the injected authbridge container serves the rewritten probes.
		line, err := appprobe.Format(r.rewriteProbes(spec))
		if err != nil {
			return nil, false, err
		}
		defaults += line
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, false, fmt.Errorf("encoding injection status: %w", err)
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	if defaults != "" {
		out.Annotations[AnnotationIdentityDefaults] = defaults
	}
	out.Annotations[AnnotationStatus] = string(b)
	return out, true, nil
}

// ProxyEnvError is a user container that sets one of the HTTP proxy variables proxy mode sets
// (proxyEnvNames). The webhook refuses it rather than choose: overwritten, the user's proxy would
// silently stop being used; kept, the agent's calls would bypass the outbound proxy and leave
// without their token exchanged. The outbound proxy does not chain to another proxy.
type ProxyEnvError struct {
	// Field is the variable's path in the pod template, e.g. spec.containers[0].env[2].
	Field, Container, Name string
}

func (e *ProxyEnvError) Error() string {
	if strings.EqualFold(e.Name, "NO_PROXY") {
		return fmt.Sprintf("%s (%q): %s is set by the injector in proxy mode (%s: %s, the outbound proxy); remove it and list the hosts to reach directly in the annotation %s",
			e.Field, e.Container, e.Name, LabelInterception, config.InterceptionProxy, AnnotationNoProxy)
	}
	return fmt.Sprintf("%s (%q): %s is set by the injector in proxy mode (%s: %s): the agent's HTTP calls go through the outbound proxy, which does not chain to another proxy; remove the variable, or use %s: %s",
		e.Field, e.Container, e.Name, LabelInterception, config.InterceptionProxy, LabelInterception, config.InterceptionTransparent)
}

// checkProxyEnv returns a *ProxyEnvError for the first user container of spec.containers that sets
// a variable of proxyEnvNames, when r sets them; a container whose variables an earlier injection
// added (old's ProxyEnv) is checked after they are stripped.
func checkProxyEnv(t *corev1.PodTemplateSpec, r *Rendered, old *Status) error {
	if r.UserEnv == nil {
		return nil
	}
	for i, c := range t.Spec.Containers {
		if r.isComponent(c.Name) || (old != nil && slices.Contains(old.ProxyEnv, c.Name)) {
			continue
		}
		for j, e := range c.Env {
			if slices.Contains(proxyEnvNames, e.Name) {
				return &ProxyEnvError{Field: fmt.Sprintf("spec.containers[%d].env[%d]", i, j), Container: c.Name, Name: e.Name}
			}
		}
	}
	return nil
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
	exclude := l.Component
	if l.Component == contract.ContainerAuthbridge {
		// Not a component: it runs as long as one of its roles does.
		exclude = "client-registration, auth-proxy and envoy-proxy"
	}
	return fmt.Sprintf("%s (%q): port %d/%s is the port the injected %s listens on (%s); use another port, or exclude %s with %s",
		e.Field, e.Container, l.Port.ContainerPort, l.Port.Protocol, l.Component, l.Setting, exclude, AnnotationExcludeComponents)
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

// Strip removes from t exactly what s says the injector added, and the status annotation itself
// (and the identity defaults); nil s removes nothing.
func Strip(t *corev1.PodTemplateSpec, s *Status) {
	if s == nil {
		return
	}
	restoreProbes(t) // from the identity defaults, deleted below
	if s.Version == StatusV1 {
		stripV1(t, s)
	} else {
		stripV2(t, s)
	}
	spec := &t.Spec
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

// injectedContainer reports whether s says the injector added the container name (s may be nil).
func (s *Status) injectedContainer(name string) bool {
	switch {
	case s == nil:
		return false
	case s.Version == StatusV1:
		return slices.Contains(s.InitContainers, name) || slices.Contains(s.Containers, name)
	}
	return slices.Contains(InjectedContainers(s.Version), name) && !slices.Contains(s.Kept, name)
}

// stripV1 removes the names a v1 status lists.
func stripV1(t *corev1.PodTemplateSpec, s *Status) {
	spec := &t.Spec
	spec.InitContainers = slices.DeleteFunc(spec.InitContainers, func(c corev1.Container) bool { return slices.Contains(s.InitContainers, c.Name) })
	spec.Containers = slices.DeleteFunc(spec.Containers, func(c corev1.Container) bool { return slices.Contains(s.Containers, c.Name) })
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return slices.Contains(s.Volumes, v.Name) })
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if mounts := s.VolumeMounts[c.Name]; len(mounts) > 0 {
			c.VolumeMounts = deleteMounts(c.VolumeMounts, func(m corev1.VolumeMount) bool { return slices.Contains(mounts, m.Name) })
		}
		if envs := s.Env[c.Name]; len(envs) > 0 {
			c.Env = deleteEnv(c.Env, func(e corev1.EnvVar) bool { return slices.Contains(envs, e.Name) })
		}
	}
}

// stripV2 removes (v2 to v5) every injected name of the status's version but the kept ones, and
// the trace mount from every remaining container that did not have its own, and (v2, v3) the
// trace variable from every one that did not have its own.
func stripV2(t *corev1.PodTemplateSpec, s *Status) {
	spec := &t.Spec
	injected := func(name string, all []string) bool {
		return slices.Contains(all, name) && !slices.Contains(s.Kept, name)
	}
	all := InjectedContainers(s.Version)
	for i := range spec.Containers {
		if c := &spec.Containers[i]; slices.Contains(s.ProxyEnv, c.Name) {
			c.Env = deleteEnv(c.Env, func(e corev1.EnvVar) bool { return slices.Contains(proxyEnvNames, e.Name) })
		}
	}
	drop := func(c corev1.Container) bool { return injected(c.Name, all) }
	spec.InitContainers = slices.DeleteFunc(spec.InitContainers, drop)
	spec.Containers = slices.DeleteFunc(spec.Containers, drop)
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return injected(v.Name, contract.InjectedVolumes) })
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if !slices.Contains(s.OwnTraceMount, c.Name) {
			c.VolumeMounts = deleteMounts(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == VolumeTrace })
		}
		if (s.Version == StatusV2 || s.Version == StatusV3) && !slices.Contains(s.OwnTraceEnv, c.Name) {
			c.Env = deleteEnv(c.Env, func(e corev1.EnvVar) bool { return e.Name == EnvTraceDir })
		}
	}
}

// deleteMounts and deleteEnv delete from a container's list, leaving nil rather than empty (as
// the user's template had it).
func deleteMounts(ms []corev1.VolumeMount, del func(corev1.VolumeMount) bool) []corev1.VolumeMount {
	if ms = slices.DeleteFunc(ms, del); len(ms) == 0 {
		return nil
	}
	return ms
}

func deleteEnv(es []corev1.EnvVar, del func(corev1.EnvVar) bool) []corev1.EnvVar {
	if es = slices.DeleteFunc(es, del); len(es) == 0 {
		return nil
	}
	return es
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

// present reports whether everything s says was injected is still in t. It is called with the
// rendering of s.Hash, so what was injected is r's names but the kept ones (v2), or s's lists (v1).
func present(t *corev1.PodTemplateSpec, s *Status, r *Rendered) bool {
	if defaults, _ := contract.SplitAppProbes(t.Annotations[AnnotationIdentityDefaults]); defaults != r.IdentityDefaults || !r.probesPresent(t, slices.Contains(s.Kept, contract.ContainerAuthbridge)) {
		return false
	}
	has := names(t.Spec.InitContainers, t.Spec.Containers)
	containers, volumes := slices.Concat(s.InitContainers, s.Containers), s.Volumes
	if s.Version != StatusV1 {
		containers, volumes = nil, nil
		for _, c := range slices.Concat(r.InitContainers, r.Containers) {
			if !slices.Contains(s.Kept, c.Name) {
				containers = append(containers, c.Name)
			}
		}
		for _, v := range r.Volumes {
			if !slices.Contains(s.Kept, v.Name) {
				volumes = append(volumes, v.Name)
			}
		}
	}
	for _, n := range containers {
		if !has[n] {
			return false
		}
	}
	for _, n := range volumes {
		if !slices.ContainsFunc(t.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == n }) {
			return false
		}
	}
	mounted := func(c *corev1.Container, name string) bool {
		return slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.Name == name })
	}
	set := func(c *corev1.Container, name string) bool {
		return slices.ContainsFunc(c.Env, func(v corev1.EnvVar) bool { return v.Name == name })
	}
	if !containersHave(t.Spec.Containers, s.VolumeMounts, mounted) || !containersHave(t.Spec.Containers, s.Env, set) {
		return false
	}
	// A user container added since the last injection still lacks the trace mount (or, in proxy
	// mode, the proxy variables): inject again.
	for _, c := range t.Spec.Containers {
		if r.isComponent(c.Name) {
			continue
		}
		for _, e := range r.UserEnv {
			if !slices.Contains(c.Env, e) {
				return false
			}
		}
		for _, m := range r.UserMounts {
			if !slices.ContainsFunc(c.VolumeMounts, func(u corev1.VolumeMount) bool { return u.Name == m.Name || u.MountPath == m.MountPath }) {
				return false
			}
		}
	}
	return true
}

// containersHave says whether every container named in added exists in containers and has each
// of the names listed for it (has: a volume mount's or a variable's).
func containersHave(containers []corev1.Container, added map[string][]string, has func(c *corev1.Container, name string) bool) bool {
	for cname, names := range added {
		i := slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == cname })
		if i < 0 {
			return false
		}
		for _, n := range names {
			if !has(&containers[i], n) {
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
