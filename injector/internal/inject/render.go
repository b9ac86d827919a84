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
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/pkg/configmap"
)

// Volume names and mount paths of docs/architecture.md §5.
const (
	VolumeShared        = "kagenti-shared"
	VolumeSpireSocket   = "spire-agent-socket"
	VolumeTokenExchange = "kagenti-token-exchange"
	VolumeTrace         = "kagenti-trace"

	PathShared        = "/shared"
	PathSpireSocket   = "/run/spire/agent-sockets"
	PathTokenExchange = "/etc/kagenti/token-exchange"
	PathTrace         = "/etc/kagenti/trace"

	// EnvTraceDir is the only environment variable added to the user's containers.
	EnvTraceDir = "KAGENTI_TRACE_DIR"

	// AlwaysExcludedOutboundPort is the IdP port that proxy-init never redirects, so
	// client-registration reaches the IdP before envoy-proxy has credentials.
	AlwaysExcludedOutboundPort = 8080

	nonRootUID = 1000
)

// Rendered is everything the injector adds to a pod template for one workload.
type Rendered struct {
	// InitContainers go first, in order: proxy-init, then (native mode) the sidecars.
	InitContainers []corev1.Container
	// Containers are the sidecars in classic mode, appended after the user's containers.
	Containers []corev1.Container
	Volumes    []corev1.Volume
	// UserMounts and UserEnv are added to every user container (the trace configuration).
	UserMounts []corev1.VolumeMount
	UserEnv    []corev1.EnvVar
	// Listeners are the ports the injected containers listen on in the pod's network namespace.
	Listeners []Listener
	// Hash identifies the configuration and options this was rendered from.
	Hash string
}

// Listener is a port an injected container listens on, and the configuration field that sets it.
type Listener struct {
	Component string
	Port      corev1.ContainerPort
	Setting   string
}

// listenerSettings names the configuration field behind each injected container's port.
var listenerSettings = map[string]string{
	config.AuthProxy:  "identity.inboundPort",
	config.EnvoyProxy: "identity.outboundPort",
}

// Render builds the components for a workload. It fails only with an *InvalidError, when a resource
// annotation makes a request exceed its limit.
func Render(cfg *config.Config, o Options) (*Rendered, error) {
	r := &Rendered{Hash: renderHash(cfg, o)}
	on := func(name string) bool {
		if o.Exclude[name] {
			return false
		}
		if name == config.ProxyInit && o.Exclude[config.EnvoyProxy] {
			return false // without envoy-proxy, redirecting outbound traffic to it would cut the pod off
		}
		return name != config.SpiffeHelper || o.Spiffe
	}
	var sidecars []corev1.Container
	for _, name := range config.Components {
		if !on(name) {
			continue
		}
		c, err := renderContainer(cfg, o, name)
		if err != nil {
			return nil, err
		}
		for _, p := range c.Ports {
			r.Listeners = append(r.Listeners, Listener{Component: name, Port: p, Setting: listenerSettings[name]})
		}
		switch {
		case name == config.ProxyInit:
			r.InitContainers = append(r.InitContainers, c)
		default:
			sidecars = append(sidecars, c)
		}
	}
	if cfg.SidecarMode == config.SidecarNative {
		for i := range sidecars {
			sidecars[i].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		}
		r.InitContainers = append(r.InitContainers, sidecars...)
	} else {
		r.Containers = sidecars
	}
	if len(sidecars) > 0 {
		r.Volumes = append(r.Volumes, corev1.Volume{Name: VolumeShared, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	if on(config.SpiffeHelper) {
		r.Volumes = append(r.Volumes, spireSocketVolume(cfg.SpireSocket))
	}
	if len(sidecars) > 0 {
		r.Volumes = append(r.Volumes, configMapVolume(VolumeTokenExchange, configmap.TokenExchangeName(o.Workload)))
	}
	r.Volumes = append(r.Volumes, configMapVolume(VolumeTrace, configmap.TraceName(o.Workload)))
	r.UserMounts = []corev1.VolumeMount{{Name: VolumeTrace, MountPath: PathTrace, ReadOnly: true}}
	r.UserEnv = []corev1.EnvVar{{Name: EnvTraceDir, Value: PathTrace}}
	return r, nil
}

func renderHash(cfg *config.Config, o Options) string {
	b, _ := json.Marshal(struct {
		Config  string
		Options Options
	}{cfg.Hash(), o})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func renderContainer(cfg *config.Config, o Options, name string) (corev1.Container, error) {
	comp := cfg.Components[name]
	res, err := mergeResources(name, comp.Resources, o.Resources[name], o.resourceText)
	if err != nil {
		return corev1.Container{}, err
	}
	c := corev1.Container{
		Name:            name,
		Image:           comp.Image,
		ImagePullPolicy: cfg.ImagePullPolicy,
		Resources:       res,
		// The API server's defaults, written out so that a stored template compares equal.
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}
	id := cfg.Identity
	switch name {
	case config.ProxyInit:
		c.Env = []corev1.EnvVar{
			env("KAGENTI_OUTBOUND_PROXY_PORT", itoa(id.OutboundPort)),
			env("KAGENTI_PROXY_UID", strconv.FormatInt(id.ProxyUID, 10)),
			env("KAGENTI_OUTBOUND_PORTS_EXCLUDE", ports(append([]int32{AlwaysExcludedOutboundPort}, o.OutboundPortsExclude...))),
			env("KAGENTI_INBOUND_PORTS_EXCLUDE", ports(o.InboundPortsExclude)),
		}
		c.SecurityContext = &corev1.SecurityContext{
			RunAsUser:                ptr.To[int64](0),
			RunAsNonRoot:             ptr.To(false),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{
				Add:  []corev1.Capability{"NET_ADMIN", "NET_RAW"},
				Drop: []corev1.Capability{"ALL"},
			},
		}
		return c, nil
	case config.SpiffeHelper:
		c.Env = append(identityEnv(cfg, o),
			env("SPIFFE_ENDPOINT_SOCKET", "unix://"+id.SocketPath),
			env("KAGENTI_TRUST_DOMAIN", id.TrustDomain),
			env("KAGENTI_JWT_AUDIENCE", id.JWTAudience),
			env("KAGENTI_JWT_SVID_FILE", PathShared+"/jwt_svid.token"),
		)
		c.VolumeMounts = append(identityMounts(), corev1.VolumeMount{Name: VolumeSpireSocket, MountPath: PathSpireSocket, ReadOnly: true})
		c.SecurityContext = restricted(nonRootUID, true)
	case config.ClientRegistration:
		c.Env = append(identityEnv(cfg, o),
			env("KAGENTI_SPIFFE_ENABLED", strconv.FormatBool(o.Spiffe && !o.Exclude[config.SpiffeHelper])),
			env("KAGENTI_JWT_SVID_FILE", PathShared+"/jwt_svid.token"),
			env("KAGENTI_CLIENT_ID_FILE", PathShared+"/client-id.txt"),
			env("KAGENTI_CLIENT_SECRET_FILE", PathShared+"/client-secret.txt"),
		)
		c.VolumeMounts = identityMounts()
		c.SecurityContext = restricted(nonRootUID, true)
	case config.AuthProxy:
		c.Env = append(identityEnv(cfg, o),
			env("KAGENTI_INBOUND_PORT", itoa(id.InboundPort)),
			env("KAGENTI_TARGET_PORT", itoa(id.TargetPort)),
			env("KAGENTI_JWT_AUDIENCE", id.JWTAudience),
		)
		c.Ports = []corev1.ContainerPort{{Name: "kagenti-in", ContainerPort: id.InboundPort, Protocol: corev1.ProtocolTCP}}
		c.VolumeMounts = identityMounts()
		c.SecurityContext = restricted(id.ProxyUID, false)
	case config.EnvoyProxy:
		c.Env = append(identityEnv(cfg, o),
			env("KAGENTI_OUTBOUND_PORT", itoa(id.OutboundPort)),
			env("KAGENTI_TOKEN_EXCHANGE", strconv.FormatBool(id.TokenExchange)),
			env("KAGENTI_DEFAULT_AUDIENCE", id.DefaultAudience),
			env("KAGENTI_CLIENT_ID_FILE", PathShared+"/client-id.txt"),
			env("KAGENTI_CLIENT_SECRET_FILE", PathShared+"/client-secret.txt"),
		)
		c.Ports = []corev1.ContainerPort{{Name: "kagenti-out", ContainerPort: id.OutboundPort, Protocol: corev1.ProtocolTCP}}
		c.VolumeMounts = identityMounts()
		c.SecurityContext = restricted(id.ProxyUID, false)
	}
	return c, nil
}

// identityEnv is the environment every identity sidecar shares: who the workload is, where the IdP
// is, and where run-time overrides live (files there win over these defaults).
func identityEnv(cfg *config.Config, o Options) []corev1.EnvVar {
	id := cfg.Identity
	return []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
		env("KAGENTI_WORKLOAD", o.Workload),
		env("KAGENTI_CONFIG_DIR", PathTokenExchange),
		env("KAGENTI_SHARED_DIR", PathShared),
		env("KAGENTI_IDP_URL", id.IdPURL),
		env("KAGENTI_REALM", id.Realm),
		env("KAGENTI_TOKEN_URL", strings.TrimSuffix(id.IdPURL, "/")+"/realms/"+id.Realm+"/protocol/openid-connect/token"),
	}
}

func identityMounts() []corev1.VolumeMount {
	return []corev1.VolumeMount{
		{Name: VolumeShared, MountPath: PathShared},
		{Name: VolumeTokenExchange, MountPath: PathTokenExchange, ReadOnly: true},
	}
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
		DefaultMode:          ptr.To(corev1.ConfigMapVolumeSourceDefaultMode),
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

func env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

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
