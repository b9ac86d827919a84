package check

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Identity defaults of the injector (docs/architecture.md §5) and of the agentcard Deployment.
const (
	defaultIdPURL       = "http://keycloak.kagenti-system.svc:8080"
	defaultCSIDriver    = "csi.spiffe.io"
	defaultTrustBundle  = "kagenti-system/spire-bundle"
	defaultTrustKey     = "bundle.crt"
	labelSpiffe         = "kagenti.io/spiffe"
	injectorConfigMap   = "kagenti-injector"
	injectorConfigKey   = "config.yaml"
	trustBundleFlag     = "--trust-bundle-configmap"
	trustBundleKeyFlag  = "--trust-bundle-key"
	serviceNameLabelKey = "kubernetes.io/service-name"
)

// injectorConfig is the part of the injector's configuration check reads (a local view: the
// injector's own config package is internal to it).
type injectorConfig struct {
	SpireSocket struct {
		Type      string `json:"type"`
		CSIDriver string `json:"csiDriver"`
	} `json:"spireSocket"`
	Identity struct {
		IdPURL string `json:"idpURL"`
	} `json:"identity"`
}

func (r *runner) injectorConfig(ctx context.Context) (injectorConfig, string) {
	var cfg injectorConfig
	source := "the injector's built-in defaults (no ConfigMap " + r.opts.Namespace + "/" + injectorConfigMap + ")"
	cm, err := r.c.Kube.CoreV1().ConfigMaps(r.opts.Namespace).Get(ctx, injectorConfigMap, metav1.GetOptions{})
	if err == nil {
		if raw := cm.Data[injectorConfigKey]; raw != "" && yaml.Unmarshal([]byte(raw), &cfg) == nil {
			source = "ConfigMap " + r.opts.Namespace + "/" + injectorConfigMap
		}
	}
	if cfg.Identity.IdPURL == "" {
		cfg.Identity.IdPURL = defaultIdPURL
	}
	if cfg.SpireSocket.Type == "" {
		cfg.SpireSocket.Type = "csi"
	}
	if cfg.SpireSocket.CSIDriver == "" {
		cfg.SpireSocket.CSIDriver = defaultCSIDriver
	}
	return cfg, source
}

// identity checks what SPIFFE identity needs (when it is used) and the IdP the sidecars register with.
func (r *runner) identity(ctx context.Context) {
	if !r.opts.expects("injector") {
		return
	}
	cfg, source := r.injectorConfig(ctx)
	used, why := r.identityUsed(ctx)
	if used {
		if cfg.SpireSocket.Type == "csi" {
			r.csiDriver(ctx, cfg.SpireSocket.CSIDriver)
		} else {
			r.skip("SPIRE agent socket", "from a hostPath (spireSocket.type %s): no CSI driver needed", cfg.SpireSocket.Type)
		}
		r.trustBundle(ctx)
	} else {
		r.skip("identity", "%s: the SPIRE checks (CSI driver, trust bundle) are skipped (--identity=true runs them)", why)
	}
	r.idp(ctx, cfg.Identity.IdPURL, source)
}

func (r *runner) identityUsed(ctx context.Context) (bool, string) {
	switch r.opts.Identity {
	case "true":
		return true, ""
	case "false":
		return false, "--identity=false"
	}
	opts := metav1.ListOptions{LabelSelector: labelSpiffe + "=enabled", Limit: 1}
	apps, batch := r.c.Kube.AppsV1(), r.c.Kube.BatchV1()
	if l, err := apps.Deployments("").List(ctx, opts); err == nil && len(l.Items) > 0 {
		return true, ""
	}
	if l, err := apps.StatefulSets("").List(ctx, opts); err == nil && len(l.Items) > 0 {
		return true, ""
	}
	if l, err := apps.DaemonSets("").List(ctx, opts); err == nil && len(l.Items) > 0 {
		return true, ""
	}
	if l, err := batch.Jobs("").List(ctx, opts); err == nil && len(l.Items) > 0 {
		return true, ""
	}
	if l, err := batch.CronJobs("").List(ctx, opts); err == nil && len(l.Items) > 0 {
		return true, ""
	}
	return false, "no workload is labelled " + labelSpiffe + "=enabled"
}

func (r *runner) csiDriver(ctx context.Context, name string) {
	subject := "CSIDriver " + name
	_, err := r.c.Kube.StorageV1().CSIDrivers().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		r.fail(subject, "install SPIRE with its CSI driver (spiffe-csi-driver), or set spireSocket.type: hostPath in the injector's configuration",
			"not installed: pods that mount the SPIRE agent socket through it cannot start")
	case err != nil:
		r.fail(subject, "check your access to csidrivers", "cannot read it: %v", err)
	default:
		r.pass(subject, "installed (the injected spire-agent-socket volume uses it)")
	}
}

// trustBundle checks the ConfigMap agentcard verifies card signatures against.
func (r *runner) trustBundle(ctx context.Context) {
	ref, key := r.trustBundleRef(ctx)
	ns, name, _ := strings.Cut(ref, "/")
	subject := "trust bundle ConfigMap " + ref
	fix := "SPIRE's k8sbundle notifier publishes it; point agentcard's --trust-bundle-configmap at where it does"
	cm, err := r.c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		r.fail(subject, fix, "missing: AgentCard signatures cannot be verified (SignatureVerified=False, NoTrustBundle)")
	case err != nil:
		r.fail(subject, "check your access to configmaps in "+ns, "cannot read it: %v", err)
	case cm.Data[key] == "":
		r.fail(subject, fix, "has no key %s", key)
	default:
		r.pass(subject, "present (key %s)", key)
	}
}

// trustBundleRef is the trust bundle agentcard uses: its Deployment's flag, else --trust-bundle,
// else the shipped default.
func (r *runner) trustBundleRef(ctx context.Context) (string, string) {
	ref, key := r.opts.TrustBundle, defaultTrustKey
	if d, err := r.c.Kube.AppsV1().Deployments(r.opts.Namespace).Get(ctx, "kagenti-agentcard", metav1.GetOptions{}); err == nil {
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, trustBundleFlag+"="); ok {
					ref = v
				}
				if v, ok := strings.CutPrefix(a, trustBundleKeyFlag+"="); ok {
					key = v
				}
			}
		}
	}
	if ref == "" {
		ref = defaultTrustBundle
	}
	return ref, key
}

// clusterHost matches a Service's DNS name: <service>.<namespace>.svc[.<cluster domain>].
var clusterHost = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc(\.[a-z0-9.-]+)?$`)

// idp checks that the identity provider's URL resolves: a cluster Service name must name an
// existing Service with ready endpoints (that is what cluster DNS resolves), any other host must
// resolve in DNS.
func (r *runner) idp(ctx context.Context, raw, source string) {
	subject := "IdP " + raw
	fix := "identity.idpURL in the injector's configuration (ConfigMap " + r.opts.Namespace + "/" + injectorConfigMap + ") must name the IdP the sidecars register with; a TokenExchange can set another per workload"
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		r.fail(subject, fix, "not a URL (from %s)", source)
		return
	}
	host := u.Hostname()
	if m := clusterHost.FindStringSubmatch(host); m != nil {
		svc, ns := m[1], m[3]
		got, err := r.c.Kube.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			r.fail(subject, fix, "does not resolve: no Service %s/%s (from %s)", ns, svc, source)
			return
		}
		if err != nil {
			r.fail(subject, "check your access to services in "+ns, "cannot read Service %s/%s: %v", ns, svc, err)
			return
		}
		if got.Spec.ExternalName != "" {
			r.lookup(ctx, subject, fix, got.Spec.ExternalName, fmt.Sprintf("Service %s/%s → %s", ns, svc, got.Spec.ExternalName))
			return
		}
		ready, err := r.readyEndpoints(ctx, ns, svc)
		if err != nil {
			r.fail(subject, "check your access to endpointslices in "+ns, "cannot read the endpoints of Service %s/%s: %v", ns, svc, err)
			return
		}
		if ready == 0 {
			r.fail(subject, "start the IdP behind Service "+ns+"/"+svc, "resolves to Service %s/%s, which has no ready endpoints", ns, svc)
			return
		}
		r.pass(subject, "resolves to Service %s/%s with %d ready endpoint(s) (from %s)", ns, svc, ready, source)
		return
	}
	r.lookup(ctx, subject, fix, host, source)
}

func (r *runner) lookup(ctx context.Context, subject, fix, host, source string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		r.fail(subject, fix, "%s does not resolve (from %s): %v", host, source, err)
		return
	}
	r.pass(subject, "%s resolves to %s (from %s)", host, strings.Join(addrs, ", "), source)
}

func (r *runner) readyEndpoints(ctx context.Context, ns, svc string) (int, error) {
	slices, err := r.c.Kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: serviceNameLabelKey + "=" + svc})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n++
			}
		}
	}
	return n, nil
}
