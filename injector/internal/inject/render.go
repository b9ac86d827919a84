// Package inject renders the identity infrastructure of docs/architecture.md §5 and merges it into a pod
// template, Istio style: Render (configuration + workload options → components), Inject (template +
// rendered → new template, recording what it added in the status annotation), Strip (removes exactly
// what the status annotation lists). Everything here is pure: no client, no clock.
package inject

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/configmap/identity"
)

// Volume names and mount paths of docs/architecture.md §5 (pkg/configmap holds the contract).
const (
	VolumeShared         = contract.VolumeShared
	VolumeSpireSocket    = contract.VolumeSpireSocket
	VolumeTrace          = contract.VolumeTrace
	VolumeIdPCredentials = contract.VolumeIdPCredentials
	VolumeIdentity       = contract.VolumeIdentity

	PathShared         = contract.PathShared
	PathSpireSocket    = contract.PathSpireSocket
	PathTrace          = contract.PathTrace
	PathIdPCredentials = contract.PathIdPCredentials
	PathIdentity       = contract.PathIdentity

	// EnvTraceDir is the variable injectors of status v1 to v3 added to every user container, set to
	// PathTrace (the reader's own default): v4 adds none, and strips theirs on upgrade.
	EnvTraceDir = "KAGENTI_TRACE_DIR"

	// spiffeHelperUID runs spiffe-helper (docs/architecture.md §5); the other identity sidecars run as
	// the proxy UID, so that proxy-init never redirects their own traffic (to the IdP, the JWKS).
	spiffeHelperUID = 1000
)

// Rendered is everything the injector adds to a pod template for one workload.
type Rendered struct {
	// InitContainers go first, in order: proxy-init, then (native mode) the sidecars.
	InitContainers []corev1.Container
	// Containers are the sidecars in classic mode, appended after the user's containers.
	Containers []corev1.Container
	Volumes    []corev1.Volume
	// UserMounts are added to every user container (the trace configuration).
	UserMounts []corev1.VolumeMount
	// UserEnv is added to every user container of spec.containers in proxy mode: the HTTP proxy
	// variables naming the outbound proxy (proxyEnv); nil in transparent mode.
	UserEnv []corev1.EnvVar
	// Interception is the mode rendered (config.InterceptionTransparent, config.InterceptionProxy).
	Interception string
	// ServiceTargetPort is, in proxy mode with the inbound proxy, the name of the authbridge
	// container's inbound port (PortNameInbound): the port a Service must target for
	// its requests to be authenticated ("" otherwise: transparent mode redirects any port).
	ServiceTargetPort string
	// IdentityDefaults is the value of the pod annotation AnnotationIdentityDefaults ("" when no
	// kagenti-authbridge container is injected).
	IdentityDefaults string
	// Listeners are the ports the injected containers listen on in the pod's network namespace.
	Listeners []Listener
	// ProxyUID is the UID (and group) the identity containers run as and the interception rules
	// exempt, reserved to them in the pod (checkProxyIdentity); 0 when nothing is injected.
	ProxyUID int64
	// Hash identifies what is added (renderHash): equal hashes, equal injections.
	Hash string

	// appProbes says which probes of the user's containers Inject rewrites (nil: none). They are
	// the template's: the status records them, not the hash.
	appProbes *probeRewrite

	// encoded is the JSON of each element above (AppendEncoded), encoded once per rendering.
	encoded encoded
}

// Listener is a port an injected container listens on, and what sets it.
type Listener struct {
	Component string
	Port      corev1.ContainerPort
	// Setting says where the port comes from, e.g. "identity.inboundPort of the injector configuration".
	Setting string
}

func tcp(port int32) corev1.ContainerPort {
	return corev1.ContainerPort{ContainerPort: port, Protocol: corev1.ProtocolTCP}
}

// listeners returns the ports component name binds in the pod's network namespace (a role of the
// authbridge container binds its own ports there as its own container did).
func listeners(cfg *config.Config, name string) []Listener {
	status := "its fixed status port"
	switch name {
	case config.AuthProxy:
		return []Listener{{name, tcp(cfg.Identity.InboundPort), "identity.inboundPort of the injector configuration"}, {name, tcp(contract.StatusPortInbound), status}}
	case config.EnvoyProxy:
		return []Listener{{name, tcp(cfg.Identity.OutboundPort), "identity.outboundPort of the injector configuration"}, {name, tcp(contract.StatusPortOutbound), status}}
	case config.ClientRegistration:
		return []Listener{{name, tcp(contract.StatusPortRegister), status}}
	case config.SpiffeHelper:
		return []Listener{{name, tcp(contract.HealthPortSpiffeHelper), "its fixed health port"}}
	}
	return nil
}

// sidecarRoles returns the kagenti-authbridge roles the authbridge container runs for o, in the
// order `kagenti-authbridge sidecar` starts them (contract.SidecarRoles), and their components.
func sidecarRoles(o Options) (roles, components []string) {
	for _, role := range contract.SidecarRoles {
		for _, c := range []string{config.ClientRegistration, config.AuthProxy, config.EnvoyProxy} {
			if contract.AuthbridgeRoles[c] == role && !o.Exclude[c] {
				roles, components = append(roles, role), append(components, c)
			}
		}
	}
	return roles, components
}

// Render builds the components for a workload. It fails only with an *InvalidError: a resource
// annotation makes a request exceed its limit, or the exclusions leave a component without what
// it needs.
func Render(cfg *config.Config, o Options) (*Rendered, error) {
	r := &Rendered{}
	spiffe := o.Spiffe && !o.Exclude[config.SpiffeHelper]
	proxies := !o.Exclude[config.AuthProxy] || !o.Exclude[config.EnvoyProxy]
	r.Interception = interceptionOf(cfg, o)
	proxyMode := r.Interception == config.InterceptionProxy
	// intercept: proxy-init redirects the pod's traffic (transparent mode). In proxy mode nothing
	// is redirected: the agent's HTTP clients name the outbound proxy, the Service the inbound one.
	intercept := proxies && !proxyMode
	if spiffe && o.Exclude[config.ProxyInit] {
		return nil, invalid(AnnotationExcludeComponents, o.excludeText,
			"spiffe-helper needs proxy-init, which writes its configuration (%s) at pod start; exclude spiffe-helper too, or keep proxy-init", contract.PathHelperConf)
	}
	on := func(name string) bool {
		switch {
		case o.Exclude[name]:
			return false
		case name == config.SpiffeHelper:
			return spiffe
		case name == config.ProxyInit:
			return intercept || spiffe // nothing to redirect and no helper.conf to write: no init
		}
		return true
	}
	var sidecars []corev1.Container
	for _, name := range []string{config.ProxyInit, config.SpiffeHelper} {
		if !on(name) {
			continue
		}
		c, err := renderContainer(cfg, o, name)
		if err != nil {
			return nil, err
		}
		r.Listeners = append(r.Listeners, listeners(cfg, name)...)
		if name == config.ProxyInit {
			if !intercept {
				// Only helper.conf to write: no traffic rules, no privileges.
				c.Args = append(c.Args, "--intercept=false")
				c.SecurityContext = restricted(cfg.Identity.ProxyUID, true)
			}
			r.InitContainers = append(r.InitContainers, c)
			continue
		}
		sidecars = append(sidecars, c)
	}
	if roles, components := sidecarRoles(o); len(roles) > 0 {
		c, err := renderAuthbridge(cfg, o, roles)
		if err != nil {
			return nil, err
		}
		if proxyMode && slices.Contains(components, config.AuthProxy) {
			// Named, so that a Service targets the inbound proxy by name (targetPort: kagenti-inbound)
			// whatever the configured port; the injector changes no Service of the user's.
			c.Ports = []corev1.ContainerPort{{Name: PortNameInbound, ContainerPort: cfg.Identity.InboundPort}}
			r.ServiceTargetPort = PortNameInbound
		}
		for _, name := range components {
			r.Listeners = append(r.Listeners, listeners(cfg, name)...)
		}
		r.Listeners = append(r.Listeners, Listener{config.Authbridge, tcp(contract.StatusPortAuthbridge), "its fixed status port"})
		sidecars = append(sidecars, c)
	}
	native := cfg.SidecarMode == config.SidecarNative
	for i := range sidecars {
		setProbes(&sidecars[i], native)
	}
	if native {
		for i := range sidecars {
			sidecars[i].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		}
		r.InitContainers = append(r.InitContainers, sidecars...)
	} else {
		r.Containers = sidecars
	}
	all := slices.Concat(r.InitContainers, r.Containers)
	if slices.ContainsFunc(all, func(c corev1.Container) bool { return mounts(c, VolumeShared) }) {
		r.Volumes = append(r.Volumes, corev1.Volume{Name: VolumeShared, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	if slices.ContainsFunc(all, func(c corev1.Container) bool { return mounts(c, VolumeIdentity) }) {
		r.Volumes = append(r.Volumes, identityVolume(o))
		r.IdentityDefaults = identityDefaults(cfg, o)
	}
	if on(config.SpiffeHelper) {
		r.Volumes = append(r.Volumes, spireSocketVolume(cfg.SpireSocket))
	}
	if on(config.ClientRegistration) {
		r.Volumes = append(r.Volumes, corev1.Volume{Name: VolumeIdPCredentials, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: cfg.Identity.IdPCredentialsSecret, Optional: ptr.To(true)}}})
	}
	r.Volumes = append(r.Volumes, configMapVolume(VolumeTrace, configmap.TraceName(o.Workload)))
	// No readOnly on the mounts of configMap, secret, downwardAPI and projected volumes: the kubelet mounts
	// them read-only whatever the mount says (since Kubernetes 1.10), so the field would only add
	// bytes to every stored template.
	// No variable names the mount: PathTrace is the contract's path and the reader's own default.
	r.UserMounts = []corev1.VolumeMount{{Name: VolumeTrace, MountPath: PathTrace}}
	if proxyMode && !o.Exclude[config.EnvoyProxy] {
		r.UserEnv = proxyEnv(cfg, o)
	}
	// In proxy mode nothing redirects, but the agent should listen on 127.0.0.1 only (the inbound
	// proxy cannot be bypassed then): the kubelet, on the pod IP, would never reach it. Its probes
	// are rewritten as if every port were redirected, and the authbridge runs them on loopback.
	r.appProbes = newProbeRewrite(cfg, o, (on(config.ProxyInit) && intercept) || proxyMode, r.Listeners)
	if len(all) > 0 {
		r.ProxyUID = cfg.Identity.ProxyUID
	}
	r.encodeAll()
	r.Hash = renderHash(r)
	return r, nil
}

// renderHash identifies what Inject adds to a template: the rendered output itself, not the
// configuration and options it came from, so that an injector upgrade that renders differently
// (probes added, a field dropped) re-injects a workload on its next update like a configuration
// change does, instead of leaving it with the old sidecars because its inputs look the same.
//
// It is the SHA-256 of what encoding/json writes for struct{InitContainers, Containers, Volumes,
// UserMounts, IdentityDefaults} (the hashes in every stored status annotation), assembled
// from r's encoded elements (encodeAll first) rather than encoded again: a workload's rendering is
// hashed per admission (forWorkload). TestRenderHashIsTheEncodingOfTheRendering holds the two equal.
func renderHash(r *Rendered) string {
	h := sha256.New() // written piece by piece: the document is never assembled
	list := func(key string, isNil bool, items [][]byte) {
		h.Write([]byte(key))
		if isNil {
			h.Write([]byte("null"))
			return
		}
		h.Write([]byte{'['})
		for i, e := range items {
			if i > 0 {
				h.Write([]byte{','})
			}
			h.Write(e)
		}
		h.Write([]byte{']'})
	}
	list(`{"InitContainers":`, r.InitContainers == nil, r.encoded.initContainers)
	list(`,"Containers":`, r.Containers == nil, r.encoded.containers)
	list(`,"Volumes":`, r.Volumes == nil, r.encoded.volumes)
	list(`,"UserMounts":`, r.UserMounts == nil, r.encoded.userMounts)
	if r.UserEnv != nil {
		// Only in proxy mode: the hashes of transparent injections stay those already stored.
		list(`,"UserEnv":`, false, encodeEach(r.UserEnv))
	}
	defaults, _ := json.Marshal(r.IdentityDefaults)
	h.Write([]byte(`,"IdentityDefaults":`))
	h.Write(defaults)
	h.Write([]byte{'}'})
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:8])
}

// forWorkload returns r, rendered for options equal to o but for Workload and ServiceAccount (the
// cache's key leaves them out), as Render(cfg, o) renders it: the volumes naming the workload's
// ConfigMaps, the identity defaults and the hash are o's; the containers are r's, shared. Every
// workload has its own name, so a rendering cached with the name in its key served no other
// admission: each one rendered and encoded the sidecars again.
func (r *Rendered) forWorkload(cfg *config.Config, o Options) *Rendered {
	out := *r
	out.Volumes = slices.Clone(r.Volumes)
	out.encoded.volumes = slices.Clone(r.encoded.volumes)
	for i := range out.Volumes {
		switch out.Volumes[i].Name {
		case VolumeIdentity:
			out.Volumes[i] = identityVolume(o)
		case VolumeTrace:
			out.Volumes[i] = configMapVolume(VolumeTrace, configmap.TraceName(o.Workload))
		default:
			continue
		}
		out.encoded.volumes[i], _ = json.Marshal(&out.Volumes[i])
	}
	if r.IdentityDefaults != "" {
		out.IdentityDefaults = identityDefaults(cfg, o)
	}
	out.Hash = renderHash(&out)
	return &out
}

// PortNameInbound names the authbridge container's inbound port in proxy mode: a Service's
// targetPort.
const PortNameInbound = "kagenti-inbound"

// The variables proxy mode sets on the agent's containers, both spellings: Go, Python's requests
// and httpx, Node's undici/axios and curl read one or the other (curl only the lower-case
// http_proxy, for fear of CGI's HTTP_PROXY header).
var proxyEnvNames = []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"}

// noProxyAlways are the hosts the agent's clients never send to the proxy: the pod itself.
const noProxyAlways = "localhost,127.0.0.1,::1"

// interceptionOf is the workload's interception mode: its label's, else the configuration's.
func interceptionOf(cfg *config.Config, o Options) string {
	switch {
	case o.Interception != "":
		return o.Interception
	case cfg.Interception != "":
		return cfg.Interception
	}
	return config.InterceptionTransparent
}

// proxyEnv returns the HTTP proxy variables of proxy mode: every http and https request of the
// agent's clients goes to the outbound proxy on loopback (absolute form, CONNECT for https), but
// for the pod itself and the hosts of AnnotationNoProxy.
func proxyEnv(cfg *config.Config, o Options) []corev1.EnvVar {
	proxy := "http://127.0.0.1:" + itoa(cfg.Identity.OutboundPort)
	noProxy := strings.Join(append([]string{noProxyAlways}, o.NoProxy...), ",")
	out := make([]corev1.EnvVar, 0, len(proxyEnvNames))
	for _, name := range proxyEnvNames {
		v := proxy
		if strings.EqualFold(name, "NO_PROXY") {
			v = noProxy
		}
		out = append(out, corev1.EnvVar{Name: name, Value: v})
	}
	return out
}

// renderContainer returns proxy-init (kagenti-authbridge init) or spiffe-helper (reading the
// helper.conf proxy-init wrote). Fields the API server defaults (terminationMessagePath/Policy,
// imagePullPolicy of a tagged image, protocol) are left out.
func renderContainer(cfg *config.Config, o Options, name string) (corev1.Container, error) {
	c, err := baseContainer(cfg, o, name)
	if err != nil {
		return c, err
	}
	if name == config.SpiffeHelper {
		c.Args = []string{"-config", contract.PathHelperConf}
		c.VolumeMounts = []corev1.VolumeMount{
			{Name: VolumeShared, MountPath: PathShared},
			{Name: VolumeSpireSocket, MountPath: PathSpireSocket, ReadOnly: true},
		}
		// Group: the proxy UID's, so the identity sidecars read the SVID file (mode 0640).
		c.SecurityContext = restricted(spiffeHelperUID, true)
		c.SecurityContext.RunAsGroup = ptr.To(cfg.Identity.ProxyUID)
		return c, nil
	}
	c.SecurityContext = &corev1.SecurityContext{
		RunAsUser:                ptr.To[int64](0),
		RunAsNonRoot:             ptr.To(false),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		// nftables over netlink needs CAP_NET_ADMIN only.
		Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}},
	}
	c.Args = []string{contract.AuthbridgeRoles[name]}
	c.VolumeMounts = []corev1.VolumeMount{{Name: VolumeIdentity, MountPath: PathIdentity}} // projected: read-only anyway
	if o.Spiffe && !o.Exclude[config.SpiffeHelper] {
		// It writes helper.conf for spiffe-helper; without spiffe-helper it writes nothing there.
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: VolumeShared, MountPath: PathShared})
	}
	return c, nil
}

// renderAuthbridge returns the authbridge container: one kagenti-authbridge process running roles
// (`sidecar register inbound outbound` by default), as the proxy UID, with the union of what the
// roles read: the identity volume (defaults and the TokenExchange configuration); the shared volume,
// writable when register runs (it writes the client credentials there), read-only when only
// outbound reads it (the credentials and the JWT SVID it authenticates the exchange with); the
// registration credentials only for register.
func renderAuthbridge(cfg *config.Config, o Options, roles []string) (corev1.Container, error) {
	c, err := baseContainer(cfg, o, config.Authbridge)
	if err != nil {
		return c, err
	}
	uid := cfg.Identity.ProxyUID
	c.SecurityContext = restricted(uid, true)
	c.SecurityContext.RunAsGroup = ptr.To(uid)
	c.Args = append([]string{contract.AuthbridgeSidecarCommand}, roles...)
	c.VolumeMounts = []corev1.VolumeMount{{Name: VolumeIdentity, MountPath: PathIdentity}} // projected: read-only anyway
	register, outbound := slices.Contains(roles, contract.AuthbridgeRoles[config.ClientRegistration]), slices.Contains(roles, contract.AuthbridgeRoles[config.EnvoyProxy])
	switch {
	case register:
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: VolumeShared, MountPath: PathShared})
	case outbound:
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: VolumeShared, MountPath: PathShared, ReadOnly: true})
	}
	if register {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: VolumeIdPCredentials, MountPath: PathIdPCredentials}) // secret: read-only anyway
	}
	inbound := slices.Contains(roles, contract.AuthbridgeRoles[config.AuthProxy])
	if o.Spiffe && !o.Exclude[config.SpiffeHelper] && (inbound || outbound) {
		// mtls.mode permissive or strict: the proxies read their X.509 SVID and the trust
		// domain's bundle from the SPIRE agent's Workload API (rotated in place).
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: VolumeSpireSocket, MountPath: PathSpireSocket, ReadOnly: true})
	}
	if inbound || outbound {
		// The proxies export their spans where the workload's AgentTrace points (the files of
		// {workload}-trace, read like the agent reads them); a configMap volume: read-only anyway.
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: VolumeTrace, MountPath: PathTrace})
	}
	return c, nil
}

// baseContainer is the injected container name with its image, pull policy and resources (the
// configured ones under the workload's resource annotations).
func baseContainer(cfg *config.Config, o Options, name string) (corev1.Container, error) {
	res, err := mergeResources(name, cfg.Components[name].Resources, o.Resources[name], o.resourceText)
	if err != nil {
		return corev1.Container{}, err
	}
	c := corev1.Container{Name: name, Image: cfg.Images.Image(name), Resources: res}
	if cfg.ImagePullPolicy != corev1.PullIfNotPresent {
		c.ImagePullPolicy = cfg.ImagePullPolicy // the API server's default for a pinned image
	}
	return c, nil
}

// The paths the sidecars' probes GET: kagenti-authbridge's status server (sidecar.AdminHandler)
// and spiffe-helper's health listener (its defaults; proxy-init enables it in helper.conf).
const (
	pathReady       = "/readyz" // a valid configuration, and what the role needs (credentials, signing keys)
	pathHelperLive  = "/live"   // no SVID write failed
	pathHelperReady = "/ready"  // every SVID file written
)

// startupPeriod and startupFailures bound how long a native sidecar may take to become ready
// (register reaches the IdP, spiffe-helper the SPIRE agent) before the kubelet restarts it: probed
// every second, so the next container starts at most a second after it is ready (with the
// default period of 10 s, each sidecar would add up to 10 s to the pod's start), for 5 minutes.
const (
	startupPeriod   = 1
	startupFailures = 300
)

// setProbes gives an identity sidecar its probes: spiffe-helper's on its health port, the
// authbridge container's on its aggregate status port (contract.StatusPortAuthbridge, which
// answers for every role the process runs; tokenexchange's injected_test.go GETs it from the
// binary started with the golden's arguments). Probe fields the API server defaults (timeout 1 s, period 10 s, 3
// failures, scheme HTTP) are left out.
//
//   - startup (native sidecars only): the kubelet starts the next container, and so the agent,
//     only once this one is ready, so the agent never starts before the workload is registered,
//     the SVID written and the proxies hold their configuration and keys. A classic sidecar starts
//     next to the agent whatever its probes say, so it gets none (liveness then counts from the
//     start: spiffe-helper's health listener answers as soon as the process runs).
//   - liveness: spiffe-helper only, restarted once an SVID write failed (its own health endpoint).
//     The authbridge container has none: a role's fatal error already ends the process (and the
//     kubelet restarts the container), so a liveness probe could only catch a hung HTTP server,
//     at ≈ 60 bytes in every stored template (issue 15). Its /healthz stays served, for humans.
//   - readiness: only the authbridge container, the pod's traffic path. Its aggregate /readyz
//     answers for every role it runs: inbound without signing keys rejects every request,
//     outbound without credentials cannot exchange, and without register's credentials neither
//     can. spiffe-helper keeps serving what it wrote when a later renewal fails, so its state
//     says nothing about whether the pod can take traffic.
func setProbes(c *corev1.Container, native bool) {
	get := func(path string, port int32) corev1.ProbeHandler {
		return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port)}}
	}
	var live, ready string
	var port int32
	switch c.Name {
	case config.SpiffeHelper:
		port, live, ready = contract.HealthPortSpiffeHelper, pathHelperLive, pathHelperReady
	case config.Authbridge:
		port, ready = contract.StatusPortAuthbridge, pathReady
	default:
		return
	}
	if native {
		c.StartupProbe = &corev1.Probe{ProbeHandler: get(ready, port), PeriodSeconds: startupPeriod, FailureThreshold: startupFailures}
	}
	if c.Name == config.Authbridge {
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: get(ready, port)}
	} else {
		c.LivenessProbe = &corev1.Probe{ProbeHandler: get(live, port)}
	}
}

// identityDefaults renders the identity defaults kagenti-authbridge reads (the variables of
// identity.Settings, as NAME=VALUE lines of the identity volume's defaults.env): the injector's
// configuration, narrowed by the workload's options. Every role resolves the whole
// configuration, so all of them read all of it; one annotation, projected into one file, instead
// of the same twenty variables in every container.
//
// Only what differs from the data plane is written (identity.Setting.NeedsLine): a variable equal
// to its built-in value (compiled into kagenti-authbridge) is left out, and one without a built-in
// value when it is what the data plane assumes anyway (unset, a switch on, provider keycloak).
// With the default configuration only the workload's name remains.
func identityDefaults(cfg *config.Config, o Options) string {
	var b strings.Builder
	line := func(name, value string) {
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(value)
		b.WriteByte('\n')
	}
	line("KAGENTI_WORKLOAD", o.Workload)
	if o.ServiceAccount != "" && o.ServiceAccount != DefaultServiceAccount {
		// "default" is what the data plane assumes without the line, as Kubernetes does.
		line("KAGENTI_SERVICE_ACCOUNT", o.ServiceAccount)
	}
	w := workloadOf(cfg, o)
	for _, s := range identityLines {
		v, ok := w.setting(s.Path)
		if !ok {
			v = configValue(cfg, s.Injector)
		}
		if s.NeedsLine(v) {
			line(s.Env, v)
		}
	}
	return b.String()
}

// identityLines are the rows of identity.Settings with a variable, the first of each (rows that
// share one are written once).
var identityLines = func() []identity.Setting {
	var out []identity.Setting
	seen := map[string]bool{}
	for _, s := range identity.Settings {
		if s.Env != "" && !seen[s.Env] {
			seen[s.Env] = true
			out = append(out, s)
		}
	}
	return out
}()

// workload is what a workload decides of its identity settings, rather than the configuration
// alone: its switches follow the components injected, the port exclusions its annotations.
type workload struct {
	o                              Options
	spiffe, registration, exchange bool
}

func workloadOf(cfg *config.Config, o Options) workload {
	w := workload{o: o, spiffe: o.Spiffe && !o.Exclude[config.SpiffeHelper], registration: !o.Exclude[config.ClientRegistration]}
	w.exchange = cfg.Identity.TokenExchange && (w.registration || w.spiffe) // the exchange authenticates with either
	return w
}

// setting returns the value of the setting at path when the workload decides it.
func (w workload) setting(path string) (string, bool) {
	on := strconv.FormatBool
	switch path {
	case "spiffe.enabled":
		return on(w.spiffe), true
	case "spiffe.socketPath", "spiffe.audience":
		// spiffe-helper's settings only where it runs.
		return "", !w.spiffe
	case "clientRegistration.enabled":
		return on(w.registration), true
	case "clientRegistration.keycloak.tokenExchangeEnabled", "outbound.tokenExchange.enabled":
		return on(w.exchange), true
	case "inbound.enabled":
		return on(!w.o.Exclude[config.AuthProxy]), true
	case "inbound.excludePorts":
		return ports(w.o.InboundPortsExclude), true
	case "outbound.enabled":
		return on(!w.o.Exclude[config.EnvoyProxy]), true
	case "outbound.trafficInterception.excludePorts":
		// No port is excluded by default (the seed excluded 8080, Keycloak's port and also every
		// agent's inbound port, so agent-to-agent calls were never exchanged): the outbound proxy
		// passes requests to the IdP's endpoints through itself.
		return ports(w.o.OutboundPortsExclude), true
	}
	return "", false
}

// configValue is the field of cfg at path (JSON names, e.g. identity.inboundPort) as its
// variable carries it; "" for no path.
func configValue(cfg *config.Config, path string) string {
	if path == "" {
		return ""
	}
	v := reflect.ValueOf(cfg).Elem()
	for elem := range strings.SplitSeq(path, ".") {
		f, ok := jsonField(v, elem)
		if !ok {
			panic("identity setting: the injector's configuration has no field " + path) // TestEverySettingReachesTheInjector
		}
		v = f
	}
	switch v.Kind() {
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	default:
		return v.String()
	}
}

// jsonField returns the field of struct v whose JSON name is name.
func jsonField(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); n == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// identityVolume is everything the data plane reads about its workload, in one directory
// (PathIdentity): a projected volume of the identity defaults (from the pod annotation), the
// pod's namespace, its name only when the hostname is not the name (Options.ProjectPodName;
// kagenti-authbridge falls back on the hostname), and the workload's optional ConfigMap
// {workload}-token-exchange, whose one key config.yaml then sits beside defaults.env. One volume
// and one mount per container instead of two (issue 15). The kubelet keeps a projected ConfigMap's
// files current as it does a ConfigMap volume's (no subPath is used).
func identityVolume(o Options) corev1.Volume {
	field := func(path, fieldPath string) corev1.DownwardAPIVolumeFile {
		return corev1.DownwardAPIVolumeFile{Path: path, FieldRef: &corev1.ObjectFieldSelector{FieldPath: fieldPath}}
	}
	items := []corev1.DownwardAPIVolumeFile{field(contract.IdentityDefaultsFile, "metadata.annotations['"+AnnotationIdentityDefaults+"']")}
	if o.ProjectPodName {
		items = append(items, field(contract.IdentityPodNameFile, "metadata.name"))
	}
	items = append(items, field(contract.IdentityPodNamespaceFile, "metadata.namespace"))
	return corev1.Volume{Name: VolumeIdentity, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{DownwardAPI: &corev1.DownwardAPIProjection{Items: items}},
		{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: configmap.TokenExchangeName(o.Workload)},
			Optional:             ptr.To(true),
		}},
	}}}}
}

// mounts reports whether c mounts volume.
func mounts(c corev1.Container, volume string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume })
}

func restricted(uid int64, readOnlyRoot bool) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{
		RunAsUser:                ptr.To(uid),
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if readOnlyRoot {
		sc.ReadOnlyRootFilesystem = ptr.To(true)
	}
	return sc
}

func spireSocketVolume(s config.SpireSocket) corev1.Volume {
	v := corev1.Volume{Name: VolumeSpireSocket}
	if s.Type == config.SocketHostPath {
		v.HostPath = &corev1.HostPathVolumeSource{Path: s.HostPath, Type: ptr.To(corev1.HostPathDirectory)}
	} else {
		v.CSI = &corev1.CSIVolumeSource{Driver: s.CSIDriver, ReadOnly: ptr.To(true)}
	}
	return v
}

func configMapVolume(volume, configMap string) corev1.Volume {
	return corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: configMap},
		Optional:             ptr.To(true),
	}}}
}

// mergeResources applies the annotation overrides over the configured resources and rejects a
// request above its limit (the API server would reject the pod later, far from the cause). The
// denial names the annotation the user wrote and quotes its text.
func mergeResources(component string, base, override corev1.ResourceRequirements, text map[string]string) (corev1.ResourceRequirements, error) {
	out := *base.DeepCopy()
	for k, v := range override.Requests {
		if out.Requests == nil {
			out.Requests = corev1.ResourceList{}
		}
		out.Requests[k] = v
	}
	for k, v := range override.Limits {
		if out.Limits == nil {
			out.Limits = corev1.ResourceList{}
		}
		out.Limits[k] = v
	}
	var over []corev1.ResourceName
	for k, req := range out.Requests {
		if lim, ok := out.Limits[k]; ok && req.Cmp(lim) > 0 {
			over = append(over, k)
		}
	}
	if len(over) == 0 {
		return out, nil
	}
	k := slices.Min(over) // deterministic: one denial, always the same
	req, lim := out.Requests[k], out.Limits[k]
	reqKey := "kagenti.io/" + component + "-" + string(k)
	limKey := reqKey + "-limit"
	reqText, reqSet := text[reqKey]
	limText, limSet := text[limKey]
	if !reqSet {
		// The configured request exceeds the annotated limit: the limit is what the user wrote.
		return out, invalid(limKey, limText, "the %s limit is below the configured request %s; accepted values: at least the request (lower %s too)",
			k, req.String(), reqKey)
	}
	limit := fmt.Sprintf("%q (%s)", limText, limKey)
	if !limSet {
		limit = lim.String() + " (injector configuration)"
	}
	return out, invalid(reqKey, reqText, "the %s request exceeds its limit %s; accepted values: at most the limit (raise %s too)",
		k, limit, limKey)
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }

func ports(ps []int32) string {
	seen := map[int32]bool{}
	s := make([]string, 0, len(ps))
	for _, p := range ps {
		if !seen[p] {
			seen[p] = true
			s = append(s, itoa(p))
		}
	}
	return strings.Join(s, ",")
}
