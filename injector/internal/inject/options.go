package inject

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

// Labels and annotations read from the workload (docs/architecture.md §4).
const (
	LabelInject = "kagenti.io/inject"
	LabelSpiffe = "kagenti.io/spiffe"
	// LabelInterception chooses the workload's interception mode (config.InterceptionTransparent,
	// config.InterceptionProxy); the injector configuration's interception when absent.
	LabelInterception = "kagenti.io/interception"
	// AnnotationNoProxy lists hosts (comma list, NO_PROXY syntax) the agent's HTTP clients reach
	// directly in proxy mode, after localhost, 127.0.0.1 and ::1.
	AnnotationNoProxy = "kagenti.io/no-proxy"
	AnnotationStatus  = contract.InjectionStatusAnnotation
	// AnnotationIdentityDefaults carries the identity defaults to the data plane (pkg/configmap).
	AnnotationIdentityDefaults  = contract.IdentityDefaultsAnnotation
	AnnotationExcludeComponents = "kagenti.io/exclude-components"
	AnnotationOutboundExclude   = "kagenti.io/outbound-ports-exclude"
	AnnotationInboundExclude    = "kagenti.io/inbound-ports-exclude"
	// LabelSignatureVerified is set on Pods by agentcard only, never in a pod template (§4).
	LabelSignatureVerified = "kagenti.io/signature-verified"

	InjectEnabled  = "enabled"
	InjectDisabled = "disabled"
)

// Per-component resource annotations, Istio style (sidecar.istio.io/proxyCPU):
// kagenti.io/<component>-cpu, -cpu-limit, -memory, -memory-limit, e.g.
// kagenti.io/envoy-proxy-memory-limit: 512Mi.
var resourceSuffixes = []struct {
	suffix string
	limit  bool
	name   corev1.ResourceName
}{
	// Longest suffixes first so "-cpu-limit" is not read as "-cpu".
	{"-memory-limit", true, corev1.ResourceMemory},
	{"-cpu-limit", true, corev1.ResourceCPU},
	{"-memory", false, corev1.ResourceMemory},
	{"-cpu", false, corev1.ResourceCPU},
}

// resourceBounds are the values a resource annotation may take, requests and limits alike. They
// catch typos and overflow, not tuning: a quantity such as 1e400 or 8Ei parses, but does not fit
// the int64 the kubelet and the scheduler use (it would be stored as 0 or as the largest int64),
// and 0 or a fraction of a millicore means no resources at all. No identity sidecar needs more than
// 64 cores or 64Gi; nothing runs in less than 1m or 1Mi.
var resourceBounds = map[corev1.ResourceName]struct {
	min, max resource.Quantity
	example  string
}{
	corev1.ResourceCPU:    {resource.MustParse("1m"), resource.MustParse("64"), "100m"},
	corev1.ResourceMemory: {resource.MustParse("1Mi"), resource.MustParse("64Gi"), "128Mi"},
}

// Options is what the workload asks for through its labels and annotations.
type Options struct {
	// Workload is the workload's name: the ConfigMap names of §5 derive from it.
	Workload string
	// ServiceAccount is the pod template's service account (ServiceAccountOf): the workload's
	// SPIFFE ID, and so its inbound token audience, derives from it.
	ServiceAccount string
	// ProjectPodName: the pod's hostname is not its name (HostnameIsNotPodName), so the identity
	// volume projects the name for kagenti-authbridge, which otherwise takes the hostname.
	ProjectPodName bool
	// Spiffe includes spiffe-helper and the SPIRE socket (label kagenti.io/spiffe=enabled).
	Spiffe bool
	// Interception is the workload's own interception mode (LabelInterception); "" for the
	// configuration's.
	Interception string
	// NoProxy are the hosts of AnnotationNoProxy.
	NoProxy []string
	// Exclude lists the components not to inject.
	Exclude map[string]bool
	// OutboundPortsExclude and InboundPortsExclude are passed to proxy-init (sorted, unique).
	OutboundPortsExclude []int32
	InboundPortsExclude  []int32
	// KeepAppProbes leaves the containers' probes as written (AnnotationRewriteAppProbes "false").
	KeepAppProbes bool
	// Resources overrides per injected container (config.Containers), from the resource annotations.
	Resources map[string]corev1.ResourceRequirements
	// resourceText is the user's own text of each resource annotation read, by key, so a denial
	// quotes what the user wrote rather than the quantity's canonical form.
	resourceText map[string]string
	// excludeText is the user's text of kagenti.io/exclude-components, for denials.
	excludeText string
}

// DefaultServiceAccount is the service account of pods whose template names none (the API
// server's ServiceAccount admission sets it). kagenti-authbridge assumes it too
// (authconfig.DefaultServiceAccount), so the identity defaults carry only another one.
const DefaultServiceAccount = "default"

// ReadTemplate sets the options the pod template decides: the service account and whether the
// pod's name must be projected.
func (o *Options) ReadTemplate(t *corev1.PodTemplateSpec) {
	o.ServiceAccount = ServiceAccountOf(t)
	o.ProjectPodName = HostnameIsNotPodName(t)
}

// HostnameIsNotPodName reports whether the pods of t have a hostname other than their name: the
// template sets spec.hostname, or setHostnameAsFQDN (the hostname is then the FQDN). Otherwise
// the kubelet sets the hostname to the pod's name, cut to 63 characters, and the names of a
// workload's pods never exceed that: the API server cuts a generateName base to 58 characters
// before adding 5, and a StatefulSet's name is at most 52 characters (its pods' controller
// revision label must fit in 63) before "-{ordinal}". The injector serves no bare Pods, the one
// case where a longer name is possible.
func HostnameIsNotPodName(t *corev1.PodTemplateSpec) bool {
	return t.Spec.Hostname != "" || (t.Spec.SetHostnameAsFQDN != nil && *t.Spec.SetHostnameAsFQDN)
}

// ServiceAccountOf returns the service account t's pods run as: DefaultServiceAccount when it
// names none.
func ServiceAccountOf(t *corev1.PodTemplateSpec) string {
	switch {
	case t.Spec.ServiceAccountName != "":
		return t.Spec.ServiceAccountName
	case t.Spec.DeprecatedServiceAccount != "":
		return t.Spec.DeprecatedServiceAccount
	}
	return DefaultServiceAccount
}

// InvalidError is a bad label or annotation value; the webhook denies the request with its message.
type InvalidError struct {
	Key, Value, Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("%s: invalid value %q: %s", e.Key, e.Value, e.Reason)
}

func invalid(key, value, format string, args ...any) error {
	return &InvalidError{Key: key, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// ParseOptions reads the workload's labels and annotations. Every invalid value is an *InvalidError
// naming the key and the accepted values; nothing is guessed.
func ParseOptions(workload string, labels, annotations map[string]string) (Options, error) {
	o := Options{Workload: workload, Exclude: map[string]bool{}}
	if v, ok := labels[LabelSpiffe]; ok {
		switch v {
		case "enabled":
			o.Spiffe = true
		case "disabled":
		default:
			return o, invalid(LabelSpiffe, v, "accepted values: enabled, disabled")
		}
	}
	if v, ok := labels[LabelInterception]; ok {
		switch v {
		case config.InterceptionTransparent, config.InterceptionProxy:
			o.Interception = v
		default:
			return o, invalid(LabelInterception, v, "accepted values: %s (nftables redirects set up by proxy-init, which needs NET_ADMIN), %s (HTTP_PROXY on the agent's containers; no init container, no added capability)",
				config.InterceptionTransparent, config.InterceptionProxy)
		}
	}
	if v, ok := annotations[AnnotationNoProxy]; ok {
		for _, h := range splitList(v) {
			if strings.ContainsAny(h, " \t\"'=;") {
				return o, invalid(AnnotationNoProxy, v, "%q is not a host, domain (.example.com), address or CIDR; accepted values: comma list of them", h)
			}
			o.NoProxy = append(o.NoProxy, h)
		}
	}
	if v, ok := annotations[AnnotationExcludeComponents]; ok {
		o.excludeText = v
		for _, name := range splitList(v) {
			if !config.IsComponent(name) {
				return o, invalid(AnnotationExcludeComponents, v, "unknown component %q; accepted values (comma list): %s",
					name, strings.Join(config.Components, ", "))
			}
			o.Exclude[name] = true
		}
	}
	if v, ok := annotations[AnnotationRewriteAppProbes]; ok {
		switch v {
		case "true":
		case "false":
			o.KeepAppProbes = true
		default:
			return o, invalid(AnnotationRewriteAppProbes, v, "accepted values: true (the default: probes the inbound interception catches are served by the authbridge container), false (the probes stay as written)")
		}
	}
	var err error
	if o.OutboundPortsExclude, err = parsePorts(AnnotationOutboundExclude, annotations); err != nil {
		return o, err
	}
	if o.InboundPortsExclude, err = parsePorts(AnnotationInboundExclude, annotations); err != nil {
		return o, err
	}
	if o.Resources, o.resourceText, err = parseResources(annotations); err != nil {
		return o, err
	}
	return o, nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func parsePorts(key string, annotations map[string]string) ([]int32, error) {
	v, ok := annotations[key]
	if !ok {
		return nil, nil
	}
	seen := map[int32]bool{}
	var out []int32
	for _, s := range splitList(v) {
		p, err := strconv.ParseInt(s, 10, 32)
		if err != nil || p < 1 || p > 65535 {
			return nil, invalid(key, v, "%q is not a port; accepted values: comma list of ports 1-65535", s)
		}
		if !seen[int32(p)] {
			seen[int32(p)] = true
			out = append(out, int32(p))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

func parseResources(annotations map[string]string) (map[string]corev1.ResourceRequirements, map[string]string, error) {
	var (
		out  map[string]corev1.ResourceRequirements
		text map[string]string
	)
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic: the first bad key is always the same one
	for _, key := range keys {
		name, ok := strings.CutPrefix(key, "kagenti.io/")
		if !ok {
			continue
		}
		for _, rs := range resourceSuffixes {
			component, ok := strings.CutSuffix(name, rs.suffix)
			if !ok {
				continue
			}
			v := annotations[key]
			if config.IsCombinedRole(component) {
				return nil, nil, invalid(key, v, "%s runs in the %s container with the other identity roles and has no resources of its own; use kagenti.io/%s%s",
					component, config.Authbridge, config.Authbridge, rs.suffix)
			}
			if !config.IsContainer(component) {
				return nil, nil, invalid(key, v, "unknown container %q; accepted keys: kagenti.io/<container>%s with container one of %s",
					component, rs.suffix, strings.Join(config.Containers, ", "))
			}
			q, err := parseBoundedQuantity(key, v, rs.name)
			if err != nil {
				return nil, nil, err
			}
			if out == nil {
				out, text = map[string]corev1.ResourceRequirements{}, map[string]string{}
			}
			text[key] = v
			r := out[component]
			if rs.limit {
				if r.Limits == nil {
					r.Limits = corev1.ResourceList{}
				}
				r.Limits[rs.name] = q
			} else {
				if r.Requests == nil {
					r.Requests = corev1.ResourceList{}
				}
				r.Requests[rs.name] = q
			}
			out[component] = r
			break
		}
	}
	return out, text, nil
}

// parseBoundedQuantity reads the value v of the resource annotation key as a quantity of resource
// name within resourceBounds; a denial quotes v as written.
func parseBoundedQuantity(key, v string, name corev1.ResourceName) (resource.Quantity, error) {
	b := resourceBounds[name]
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Cmp(b.min) < 0 || q.Cmp(b.max) > 0 {
		return resource.Quantity{}, invalid(key, v, "accepted values: a %s quantity from %s to %s, such as %s",
			name, b.min.String(), b.max.String(), b.example)
	}
	return q, nil
}
