package migrate

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The injector's defaults for the identity sidecars' ports (docs/architecture.md §5): auth-proxy listens
// on 8080 and forwards to the agent on 8081; envoy-proxy receives outbound traffic on 15123.
const (
	defaultInboundPort  = 8080
	defaultTargetPort   = 8081
	defaultOutboundPort = 15123
)

// inboundPorts makes the injected proxies fit the agent's own ports. An agent that serves anywhere
// but 8081 needs a TokenExchange telling auth-proxy where to forward (inbound.targetPort); an agent
// that itself listens on 8080 or 15123 would collide with auth-proxy or envoy-proxy in the shared
// network namespace, so those move to free ports.
func (m *migrator) inboundPorts(l *Ledger, w *workload, src Source, tmpl *corev1.PodTemplateSpec, ports []corev1.ServicePort) {
	agentPort, ok := servedPort(tmpl, ports[0])
	if !ok {
		w.notes = append(w.notes, fmt.Sprintf("the Service's targetPort %s names no container port: the inbound proxy keeps its defaults", ports[0].TargetPort.String()))
		return
	}
	used := map[int32]bool{agentPort: true}
	for _, list := range [][]corev1.Container{tmpl.Spec.InitContainers, tmpl.Spec.Containers} {
		for _, c := range list {
			for _, p := range c.Ports {
				used[p.ContainerPort] = true
			}
		}
	}
	inbound, outbound := int32(defaultInboundPort), int32(defaultOutboundPort)
	if used[inbound] {
		inbound = freePort(defaultTargetPort, used, outbound)
	}
	if used[outbound] {
		outbound = freePort(defaultOutboundPort+1, used, inbound)
	}
	if agentPort == defaultTargetPort && inbound == defaultInboundPort && outbound == defaultOutboundPort {
		return
	}
	tx := w.tokenExchange(src)
	in := orNew(tx.spec.Inbound)
	if agentPort != defaultTargetPort {
		in.TargetPort = ptr.To(agentPort)
		tx.notes = append(tx.notes, fmt.Sprintf("inbound.targetPort %d: the agent serves on %d (the Service's target), not on the injector's default 8081", agentPort, agentPort))
	}
	if inbound != defaultInboundPort {
		in.Port = ptr.To(inbound)
		tx.notes = append(tx.notes, fmt.Sprintf("inbound.port %d: the agent's pod already uses port 8080, where the injected auth-proxy would listen", inbound))
	}
	tx.spec.Inbound = in
	if outbound != defaultOutboundPort {
		out := orNew(tx.spec.Outbound)
		out.TrafficInterception = orNew(out.TrafficInterception)
		out.TrafficInterception.ProxyPort = ptr.To(outbound)
		tx.spec.Outbound = out
		tx.notes = append(tx.notes, fmt.Sprintf("outbound.trafficInterception.proxyPort %d: the agent's pod already uses port 15123, where the injected envoy-proxy would listen", outbound))
	}
}

// servedPort resolves the container port a Service port sends traffic to.
func servedPort(tmpl *corev1.PodTemplateSpec, sp corev1.ServicePort) (int32, bool) {
	switch {
	case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
		for _, c := range tmpl.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name == sp.TargetPort.StrVal {
					return p.ContainerPort, true
				}
			}
		}
		return 0, false
	case sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal != 0:
		return sp.TargetPort.IntVal, true
	default:
		return sp.Port, true
	}
}

func freePort(from int32, used map[int32]bool, also int32) int32 {
	for p := from; p < 65535; p++ {
		if !used[p] && p != also {
			return p
		}
	}
	return from
}
