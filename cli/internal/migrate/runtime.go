package migrate

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	tracev1 "github.com/kagenti/platform/agenttrace/api/v1alpha1"
)

// The injector's default trust domain (docs/architecture.md §5).
const defaultTrustDomain = "cluster.local"

// Reasons for the AgentRuntime fields without an equivalent.
const (
	reasonAllowedAudiences = "TokenExchange validates one inbound audience (inbound.validation.audience), which replaces the default (the workload's SPIFFE ID) instead of adding to it; accept these audiences in the IdP's audience mapping instead"
	reasonAuthBridgeMode   = "the injector has one data-plane shape, proxy-init with auth-proxy and envoy-proxy (the kagenti-operator's envoy-sidecar); proxy-sidecar, lite and waypoint have no equivalent"
	reasonMTLS             = "the injected sidecars do not speak mTLS to each other; only disabled has an equivalent"
	reasonTraceNoEndpoint  = "an AgentTrace needs the collector's endpoint, and this AgentRuntime left it to the kagenti-operator's platform defaults (ConfigMap kagenti-platform-config), which migrate does not read: write an AgentTrace with that endpoint"
	reasonSkillsNoTarget   = "the target workload is not among the inputs, so migrate cannot name the container to mount the skill images into: migrate with the workload's file too (-f) or --from-cluster"
	reasonRuntimeMetadata  = "labels and annotations of the AgentRuntime itself; no pillar CR was needed for its settings to carry them"
)

func (m *migrator) runtime(in Input) error {
	obj := in.Object
	str := func(path ...string) string {
		s, _, _ := unstructured.NestedString(obj.Object, path...)
		return s
	}
	kind, target, apiVersion := str("spec", "targetRef", "kind"), str("spec", "targetRef", "name"), str("spec", "targetRef", "apiVersion")
	if kind == "" || target == "" {
		return fmt.Errorf("%s: AgentRuntime %s: spec.targetRef needs kind and name", in.Source.Where, obj.GetName())
	}
	ns := obj.GetNamespace()
	w := m.workload(kind, ns, target)
	if w.apiVersion == "" {
		w.apiVersion = apiVersion
	}
	w.from = append(w.from, in.Source)
	l := m.ledger(in)
	l.Used(P("metadata", "name"), "names the AgentRuntime only; the pillar CRs are named after its workload")
	l.Used(P("metadata", "namespace"), "namespace of every object made from it")
	l.Used(P("spec", "targetRef"), fmt.Sprintf("the workload every object made from it targets: %s %s", kind, target))
	workloadRef := kind + "/" + target

	w.addLabels[LabelInject] = "enabled"
	if typ := str("spec", "type"); typ != "" {
		w.addLabels[LabelType] = typ
		l.Copied(P("spec", "type"), workloadRef, P("metadata", "labels", LabelType))
	}
	w.notes = append(w.notes, fmt.Sprintf("labels %s=enabled and %s from AgentRuntime %s: the injector and agentcard act on labels", LabelInject, LabelType, obj.GetName()))

	made := false
	if td := str("spec", "identity", "spiffe", "trustDomain"); td != "" {
		lower := strings.ToLower(td)
		path := P("spec", "identity", "spiffe", "trustDomain")
		if lower == defaultTrustDomain {
			l.Used(path, "cluster.local is the injector's default trust domain: nothing to configure")
		} else {
			tx := w.tokenExchange(in.Source)
			tx.spec.Spiffe = orNew(tx.spec.Spiffe)
			tx.spec.Spiffe.TrustDomain = lower
			made = true
			if lower == td {
				l.Copied(path, "TokenExchange/"+tx.name, P("spec", "spiffe", "trustDomain"))
			} else {
				l.Used(path, fmt.Sprintf("TokenExchange %s spec.spiffe.trustDomain %s (SPIFFE trust domains are lower case)", tx.name, lower))
			}
		}
	}
	l.NotMigrated(P("spec", "identity", "allowedAudiences"), reasonAllowedAudiences)

	if m.runtimeTrace(in, l, w) {
		made = true
	}
	if mode := str("spec", "authBridgeMode"); mode == "envoy-sidecar" {
		l.Used(P("spec", "authBridgeMode"), "envoy-sidecar is the shape the injector injects (proxy-init, auth-proxy, envoy-proxy)")
	} else {
		l.NotMigrated(P("spec", "authBridgeMode"), reasonAuthBridgeMode)
	}
	if mode := str("spec", "mtlsMode"); mode == "disabled" {
		l.Used(P("spec", "mtlsMode"), "disabled: the injected sidecars talk plaintext")
	} else {
		l.NotMigrated(P("spec", "mtlsMode"), reasonMTLS)
	}
	if err := m.runtimeSkills(in, l, w); err != nil {
		return err
	}

	if made {
		if w.tx != nil && w.tx.madeFrom(in.Source) {
			copyMetadata(l, obj, "TokenExchange/"+w.tx.name, &w.tx.labels, &w.tx.annotations)
		}
		if w.trace != nil && w.trace.madeFrom(in.Source) {
			copyMetadata(l, obj, "AgentTrace/"+w.trace.name, &w.trace.labels, &w.trace.annotations)
		}
	}
	l.NotMigrated(P("metadata", "labels"), reasonRuntimeMetadata)
	l.NotMigrated(P("metadata", "annotations"), reasonRuntimeMetadata)
	return nil
}

// runtimeTrace turns spec.trace into an AgentTrace with one OTLP exporter; it reports whether one was made.
func (m *migrator) runtimeTrace(in Input, l *Ledger, w *workload) bool {
	obj := in.Object
	endpoint, _, _ := unstructured.NestedString(obj.Object, "spec", "trace", "endpoint")
	if endpoint == "" {
		l.NotMigrated(P("spec", "trace"), reasonTraceNoEndpoint)
		return false
	}
	if !validEndpoint(endpoint) {
		l.NotMigrated(P("spec", "trace"), fmt.Sprintf("endpoint %q is neither host:port nor an http(s) URL, which an AgentTrace exporter needs", endpoint))
		return false
	}
	tr := w.agentTrace(in.Source)
	ref := "AgentTrace/" + tr.name
	exp := tracev1.Exporter{Type: tracev1.ExporterOTLP, Endpoint: endpoint}
	l.Copied(P("spec", "trace", "endpoint"), ref, P("spec", "exporters", Index(0), "endpoint"))
	switch protocol, _, _ := unstructured.NestedString(obj.Object, "spec", "trace", "protocol"); protocol {
	case "":
	case "grpc":
		exp.Protocol = tracev1.ProtocolGRPC
		l.Copied(P("spec", "trace", "protocol"), ref, P("spec", "exporters", Index(0), "protocol"))
	case "http":
		exp.Protocol = tracev1.ProtocolHTTPProtobuf
		l.Used(P("spec", "trace", "protocol"), "exporter protocol http/protobuf, OTLP's HTTP transport")
	default:
		l.NotMigrated(P("spec", "trace", "protocol"), fmt.Sprintf("protocol %q is neither grpc nor http", protocol))
	}
	tr.spec.Exporters = []tracev1.Exporter{exp}
	if raw, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "trace", "sampling", "rate"); found {
		rate, ok := number(raw)
		if ok && rate >= 0 && rate <= 1 {
			tr.spec.Sampling = &tracev1.Sampling{Type: tracev1.SamplingParentBasedProbabilistic, Rate: tracev1.Rate(strconv.FormatFloat(rate, 'f', -1, 64))}
			l.Used(P("spec", "trace", "sampling", "rate"), fmt.Sprintf("sampling parent_based_probabilistic, rate %v: a sampling rate in OpenTelemetry is parentbased_traceidratio", rate))
		} else {
			l.NotMigrated(P("spec", "trace", "sampling", "rate"), fmt.Sprintf("%v is not a rate between 0 and 1", raw))
		}
	}
	return true
}

// runtimeSkills mounts the AgentRuntime's OCI skill images as image volumes into the agent
// container of its workload (read-only, at each skill's mountPath).
func (m *migrator) runtimeSkills(in Input, l *Ledger, w *workload) error {
	skills, found, _ := unstructured.NestedSlice(in.Object.Object, "spec", "skills")
	if !found || len(skills) == 0 {
		return nil
	}
	container := w.agentContainer(m.live(w.kind, w.namespace, w.name))
	if container == "" {
		l.NotMigrated(P("spec", "skills"), reasonSkillsNoTarget)
		return nil
	}
	w.container = container
	for i, raw := range skills {
		s, _ := raw.(map[string]any)
		name, _ := s["name"].(string)
		image, _ := s["image"].(string)
		mountPath, _ := s["mountPath"].(string)
		policy, _ := s["pullPolicy"].(string)
		if name == "" || image == "" || mountPath == "" {
			return fmt.Errorf("%s: AgentRuntime %s: spec.skills[%d] needs name, image and mountPath", in.Source.Where, in.Object.GetName(), i)
		}
		vol := corev1.Volume{Name: "skill-" + name, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: image, PullPolicy: corev1.PullPolicy(policy)}}}
		w.skills = append(w.skills, skillMount{volume: vol, mount: corev1.VolumeMount{Name: vol.Name, MountPath: mountPath, ReadOnly: true}})
		l.Used(P("spec", "skills", Index(i)), fmt.Sprintf("image volume %s mounted read-only at %s in container %s of %s %s", vol.Name, mountPath, container, w.kind, w.name))
	}
	w.notes = append(w.notes, fmt.Sprintf("%d skill image volume(s) in container %s (Kubernetes image volumes)", len(skills), container))
	return nil
}

// agentContainer names the container skills go to: "agent" when there is one, else the first.
func (w *workload) agentContainer(live *unstructured.Unstructured) string {
	src := w.full
	if src == nil {
		src = live
	}
	if src == nil {
		return ""
	}
	path := []string{"spec", "template", "spec", "containers"}
	if w.kind == "CronJob" {
		path = []string{"spec", "jobTemplate", "spec", "template", "spec", "containers"}
	}
	containers, _, _ := unstructured.NestedSlice(src.Object, path...)
	first := ""
	for i, c := range containers {
		m, _ := c.(map[string]any)
		name, _ := m["name"].(string)
		if name == "agent" {
			return name
		}
		if i == 0 {
			first = name
		}
	}
	return first
}

// validEndpoint accepts what an AgentTrace exporter's CEL rule accepts: host:port or an http(s) URL.
func validEndpoint(s string) bool {
	if u, err := url.Parse(s); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" {
		return true
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}
