package inject

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/pkg/configmap/appprobe"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

// AnnotationRewriteAppProbes set to "false" on a workload keeps its containers' probes as written
// (the injector configuration's rewriteAppProbes switches the rewrite off for every workload).
const AnnotationRewriteAppProbes = "kagenti.io/rewrite-app-probes"

// probeRewrite says which probes of the user's containers the inbound interception would catch,
// and so which the injector rewrites (docs/injector.md, "The agent's probes"). nil: none.
type probeRewrite struct {
	inboundPort, targetPort int32
	// redirected: proxy-init redirects every inbound TCP port but exclude to the inbound proxy.
	// Without proxy-init only the inbound proxy's own port reaches it.
	redirected bool
	exclude    []int32
}

// newProbeRewrite returns the rewrite for a rendering whose inbound proxy runs (nil otherwise, or
// when the configuration or the workload switch it off). The ports never redirected are the
// workload's inbound exclusions and the injected containers' own listeners.
func newProbeRewrite(cfg *config.Config, o Options, redirected bool, listeners []Listener) *probeRewrite {
	if !cfg.RewriteAppProbes || o.KeepAppProbes || o.Exclude[config.AuthProxy] {
		return nil
	}
	p := &probeRewrite{inboundPort: cfg.Identity.InboundPort, targetPort: cfg.Identity.TargetPort, redirected: redirected}
	p.exclude = slices.Clone(o.InboundPortsExclude)
	for _, l := range listeners {
		p.exclude = append(p.exclude, l.Port.ContainerPort)
	}
	return p
}

// appPort returns the port of 127.0.0.1 the app answers port's traffic on, and whether the
// interception catches port at all: the inbound proxy's port forwards to the target port; every
// other port that is redirected is the app's own.
func (p *probeRewrite) appPort(port int32) (int32, bool) {
	switch {
	case port == p.inboundPort:
		return p.targetPort, true
	case !p.redirected || slices.Contains(p.exclude, port):
		return 0, false
	}
	return port, true
}

// original returns the record of probe pr of container c when the interception catches it, and
// false when it is left as written: no probe, an exec probe, an httpGet with a host of its own
// (it does not probe this pod, whose traffic proxy-init alone redirects), a named port c does not
// declare (the kubelet would fail it as written), a port not redirected.
func (p *probeRewrite) original(c *corev1.Container, pr *corev1.Probe) (appprobe.AppProbe, bool) {
	if pr == nil {
		return appprobe.AppProbe{}, false
	}
	var port int32
	switch h := pr.ProbeHandler; {
	case h.HTTPGet != nil && h.HTTPGet.Host == "":
		port = resolvePort(c, h.HTTPGet.Port)
	case h.TCPSocket != nil && h.TCPSocket.Host == "":
		port = resolvePort(c, h.TCPSocket.Port)
	case h.GRPC != nil:
		port = h.GRPC.Port
	}
	if port == 0 {
		return appprobe.AppProbe{}, false
	}
	app, caught := p.appPort(port)
	if !caught {
		return appprobe.AppProbe{}, false
	}
	rec := appprobe.AppProbe{ProbeHandler: pr.ProbeHandler, TimeoutSeconds: pr.TimeoutSeconds}
	if written := (appprobe.AppProbe{ProbeHandler: pr.ProbeHandler}).Port(); app != written {
		rec.AppPort = app
	}
	return rec, true
}

// resolvePort is port as a number: a named port resolved against c's ports, 0 when c declares no
// such name.
func resolvePort(c *corev1.Container, port intstr.IntOrString) int32 {
	if port.Type == intstr.Int {
		return port.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return cp.ContainerPort
		}
	}
	return 0
}

// rewrittenHandler is what a probe of container's kind becomes: a GET on the authbridge
// container's status port, which runs the original (appprobe.AppProbe) against the app.
func rewrittenHandler(container, kind string) corev1.ProbeHandler {
	return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: contract.AppProbePath(container, kind),
		Port: intstr.FromInt32(contract.StatusPortAuthbridge),
	}}
}

// isRewritten reports whether pr is the injector's rewrite of container's probe of kind: the API
// server sets the scheme it leaves out.
func isRewritten(pr *corev1.Probe, container, kind string) bool {
	if pr == nil || pr.HTTPGet == nil {
		return false
	}
	h := pr.ProbeHandler
	if h.HTTPGet.Scheme == corev1.URISchemeHTTP {
		get := *h.HTTPGet
		get.Scheme = ""
		h.HTTPGet = &get
	}
	return equality.Semantic.DeepEqual(h, rewrittenHandler(container, kind))
}

// probesOf returns c's three probes by kind.
func probesOf(c *corev1.Container) []struct {
	kind  string
	probe **corev1.Probe
} {
	return []struct {
		kind  string
		probe **corev1.Probe
	}{
		{contract.ProbeLiveness, &c.LivenessProbe},
		{contract.ProbeReadiness, &c.ReadinessProbe},
		{contract.ProbeStartup, &c.StartupProbe},
	}
}

// rewriteProbes rewrites every probe of the user's containers (init containers too: a native
// sidecar of the user's has probes) that the interception catches, and returns the originals by
// contract.AppProbeKey. The probe's other fields (period, thresholds, timeout) stay: the kubelet
// runs the rewritten probe on the original's schedule.
func (r *Rendered) rewriteProbes(spec *corev1.PodSpec) map[string]appprobe.AppProbe {
	var originals map[string]appprobe.AppProbe
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			c := &list[i]
			if r.isComponent(c.Name) {
				continue
			}
			for _, k := range probesOf(c) {
				rec, ok := r.appProbes.original(c, *k.probe)
				if !ok {
					continue
				}
				if originals == nil {
					originals = map[string]appprobe.AppProbe{}
				}
				originals[contract.AppProbeKey(c.Name, k.kind)] = rec
				rewritten := **k.probe // a copy: the template's probe may be shared with the input
				rewritten.ProbeHandler = rewrittenHandler(c.Name, k.kind)
				*k.probe = &rewritten
			}
		}
	}
	return originals
}

// restoreProbes puts back the originals recorded in the identity defaults of t (which it reads
// before Strip deletes them) wherever the probe is still the injector's rewrite; a probe the user
// changed since is the user's and stays.
func restoreProbes(t *corev1.PodTemplateSpec) {
	_, line := contract.SplitAppProbes(t.Annotations[AnnotationIdentityDefaults])
	originals, err := appprobe.Parse(line)
	if err != nil || len(originals) == 0 {
		return // not this injector's record: nothing of it is restored
	}
	for _, list := range [][]corev1.Container{t.Spec.InitContainers, t.Spec.Containers} {
		for i := range list {
			c := &list[i]
			for _, k := range probesOf(c) {
				rec, ok := originals[contract.AppProbeKey(c.Name, k.kind)]
				if !ok || !isRewritten(*k.probe, c.Name, k.kind) {
					continue
				}
				restored := **k.probe
				restored.ProbeHandler = rec.ProbeHandler
				*k.probe = &restored
			}
		}
	}
}

// probesPresent reports whether t's probes are as Inject with r leaves them: every probe the
// interception catches rewritten, every rewritten one recorded, nothing else recorded. keptAuthbridge:
// the template has the user's own authbridge container, so none is rewritten.
func (r *Rendered) probesPresent(t *corev1.PodTemplateSpec, keptAuthbridge bool) bool {
	rewrite := r.appProbes
	if keptAuthbridge {
		rewrite = nil
	}
	_, line := contract.SplitAppProbes(t.Annotations[AnnotationIdentityDefaults])
	originals, err := appprobe.Parse(line)
	if err != nil {
		return false
	}
	rewritten := 0
	for _, list := range [][]corev1.Container{t.Spec.InitContainers, t.Spec.Containers} {
		for i := range list {
			c := &list[i]
			if r.isComponent(c.Name) {
				continue
			}
			for _, k := range probesOf(c) {
				if isRewritten(*k.probe, c.Name, k.kind) {
					if _, ok := originals[contract.AppProbeKey(c.Name, k.kind)]; !ok || rewrite == nil {
						return false
					}
					rewritten++
					continue
				}
				if rewrite != nil {
					if _, caught := rewrite.original(c, *k.probe); caught {
						return false
					}
				}
			}
		}
	}
	return rewritten == len(originals)
}
