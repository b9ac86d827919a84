package check

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

var deploymentGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}

// The injector's webhook and the annotation it writes.
const (
	injectorWebhook           = "inject.kagenti.io"
	annotationInjectionStatus = "kagenti.io/injection-status"
)

// hook is one webhook of a Kagenti webhook configuration.
type hook struct {
	config string // "MutatingWebhookConfiguration kagenti-injector"
	name   string
	client admissionv1.WebhookClientConfig
}

func (h hook) where() string {
	if h.client.URL != nil {
		return *h.client.URL
	}
	if s := h.client.Service; s != nil {
		return fmt.Sprintf("Service %s/%s", s.Namespace, s.Name)
	}
	return "(no clientConfig)"
}

// webhooks checks every Kagenti webhook's certificate against its caBundle, and that the injector's
// webhook answers: a server dry run of a labelled Deployment must come back injected.
func (r *runner) webhooks(ctx context.Context, probes *probes) {
	hooks, err := r.kagentiHooks(ctx)
	if err != nil {
		r.fail("webhooks", "check your access to mutating/validatingwebhookconfigurations", "cannot list the webhook configurations: %v", err)
		return
	}
	var injector *hook
	for i := range hooks {
		if hooks[i].name == injectorWebhook {
			injector = &hooks[i]
		}
	}
	if injector != nil {
		r.injectorRegistered = true
		if injector.client.URL != nil {
			r.injectorURL = *injector.client.URL
		}
	} else if r.opts.expects("injector") {
		r.fail("webhook "+injectorWebhook, "install the injector: kubectl apply -k deploy/kustomize/overlays/injector-only (helm: --set injector.enabled=true)",
			"not registered: no MutatingWebhookConfiguration has it, so nothing is injected")
	}
	for _, h := range hooks {
		r.certificate(ctx, h)
	}
	if injector == nil {
		return
	}
	subject := "webhook " + injectorWebhook + " reachable"
	if probes.ns == "" {
		r.skip(subject, "not tried (%s)", probes.skipped)
		return
	}
	r.reachable(ctx, subject, probes.ns, *injector)
}

func (r *runner) kagentiHooks(ctx context.Context) ([]hook, error) {
	var out []hook
	mwcs, err := r.c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, cfg := range mwcs.Items {
		for _, wh := range cfg.Webhooks {
			if strings.HasSuffix(wh.Name, ".kagenti.io") {
				out = append(out, hook{config: "MutatingWebhookConfiguration " + cfg.Name, name: wh.Name, client: wh.ClientConfig})
			}
		}
	}
	vwcs, err := r.c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, cfg := range vwcs.Items {
		for _, wh := range cfg.Webhooks {
			if strings.HasSuffix(wh.Name, ".kagenti.io") {
				out = append(out, hook{config: "ValidatingWebhookConfiguration " + cfg.Name, name: wh.Name, client: wh.ClientConfig})
			}
		}
	}
	return out, nil
}

// certificate verifies the webhook's serving certificate against the caBundle the API server uses.
func (r *runner) certificate(ctx context.Context, h hook) {
	subject := "webhook " + h.name + " certificate"
	fixCA := fmt.Sprintf("the caBundle of %s must hold the CA that signed the serving certificate: the webhook's certificate rotator keeps it current (cert-manager: its cainjector); restart the webhook so that it rewrites both", h.config)
	pool := x509.NewCertPool()
	if len(h.client.CABundle) == 0 {
		r.fail(subject, fixCA, "the caBundle of %s is empty: the API server cannot verify the webhook", h.config)
		return
	}
	if !pool.AppendCertsFromPEM(h.client.CABundle) {
		r.fail(subject, fixCA, "the caBundle of %s holds no PEM certificate", h.config)
		return
	}
	chain, host, err := r.servingChain(ctx, h)
	if err != nil {
		r.fail(subject, "is the webhook running? "+err.fix, "%s", err.msg)
		return
	}
	if chain == nil {
		r.skip(subject, "%s (the reachability check still tests it through the API server)", host)
		return
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	leaf := chain[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: host}); err != nil {
		r.fail(subject, fixCA, "the certificate served for %s does not verify against the caBundle of %s: %v", h.where(), h.config, err)
		return
	}
	r.pass(subject, "%s: valid until %s, signed by the caBundle of %s", h.where(), leaf.NotAfter.UTC().Format("2006-01-02"), h.config)
}

type certErr struct{ msg, fix string }

// servingChain fetches the certificate a webhook serves: over TLS for a URL, from the Secret its
// Deployment mounts for a Service (a CLI outside the cluster cannot dial a Service). A nil chain
// without error means the certificate could not be read (host says why).
func (r *runner) servingChain(ctx context.Context, h hook) ([]*x509.Certificate, string, *certErr) {
	if h.client.URL != nil {
		u, err := url.Parse(*h.client.URL)
		if err != nil {
			return nil, "", &certErr{msg: fmt.Sprintf("clientConfig.url %q: %v", *h.client.URL, err)}
		}
		addr := u.Host
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "443")
		}
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{InsecureSkipVerify: true, ServerName: u.Hostname()}} //nolint:gosec // the chain is verified below, against the caBundle
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, "", &certErr{msg: fmt.Sprintf("nothing answers TLS at %s: %v", addr, err), fix: "it must listen at " + *h.client.URL}
		}
		defer conn.Close()
		return conn.(*tls.Conn).ConnectionState().PeerCertificates, u.Hostname(), nil
	}
	s := h.client.Service
	if s == nil {
		return nil, "", &certErr{msg: "clientConfig has neither url nor service"}
	}
	dns := fmt.Sprintf("%s.%s.svc", s.Name, s.Namespace)
	svc, err := r.c.Kube.CoreV1().Services(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", &certErr{msg: fmt.Sprintf("Service %s/%s does not exist", s.Namespace, s.Name), fix: "reinstall the pillar that serves " + h.name}
	}
	if err != nil {
		return nil, dns, nil
	}
	deps, err := r.c.Kube.AppsV1().Deployments(s.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Sprintf("cannot list Deployments in %s: %v", s.Namespace, err), nil
	}
	for _, d := range deps.Items {
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		for _, secret := range certSecrets(&d) {
			sec, err := r.c.Kube.CoreV1().Secrets(s.Namespace).Get(ctx, secret, metav1.GetOptions{})
			if err != nil || len(sec.Data[corev1.TLSCertKey]) == 0 {
				continue
			}
			chain := parseChain(sec.Data[corev1.TLSCertKey])
			if len(chain) > 0 {
				return chain, dns, nil
			}
		}
	}
	return nil, fmt.Sprintf("the serving certificate of Service %s/%s is not readable here (no Secret with tls.crt named by its Deployment)", s.Namespace, s.Name), nil
}

// certSecretFlags name the Secret of the built-in certificate rotator on the pillars' command lines;
// the controller writes its certificate from that Secret into an emptyDir, so no volume names it.
var certSecretFlags = []string{"--cert-secret=", "--discovery-cert-secret="}

// certSecrets are the Secrets that may hold a Deployment's serving certificate: those its rotator
// flags name, then those it mounts (cert-manager's).
func certSecrets(d *appsv1.Deployment) []string {
	var out []string
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			for _, f := range certSecretFlags {
				if name, ok := strings.CutPrefix(a, f); ok && name != "" {
					out = append(out, name)
				}
			}
		}
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			out = append(out, v.Secret.SecretName)
		}
	}
	return out
}

func parseChain(raw []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, raw = pem.Decode(raw)
		if block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

// reachable runs a server dry run of a Deployment labelled for injection in the scratch namespace:
// the API server calls the webhook exactly as for a real workload, and nothing is stored.
func (r *runner) reachable(ctx context.Context, subject, ns string, h hook) {
	labelsOf := map[string]string{"app": "kagenti-check"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "kagenti-check", Namespace: ns, Labels: map[string]string{"kagenti.io/inject": "enabled"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labelsOf},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labelsOf},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	got, err := r.c.Kube.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	fix := fmt.Sprintf("the API server calls %s: the injector must be running and reachable there with the certificate the caBundle of %s names (kubectl get events -A | grep %s)", h.where(), h.config, injectorWebhook)
	answered := err == nil
	r.injectorAnswers = &answered
	if err != nil {
		r.fail(subject, fix, "the API server refused a labelled Deployment (server dry run): %v", err)
		return
	}
	if _, ok := got.Spec.Template.Annotations[annotationInjectionStatus]; !ok {
		r.fail(subject, "compare the namespaceSelector and objectSelector of "+h.config+" with docs/injector.md",
			"a labelled Deployment in a namespace labelled kagenti.io/injection=enabled was admitted without injection")
		return
	}
	var injected []string
	for _, c := range got.Spec.Template.Spec.InitContainers {
		injected = append(injected, c.Name)
	}
	for _, c := range got.Spec.Template.Spec.Containers[1:] {
		injected = append(injected, c.Name)
	}
	r.pass(subject, "a labelled Deployment was injected in a server dry run (%s)", strings.Join(injected, ", "))
}
