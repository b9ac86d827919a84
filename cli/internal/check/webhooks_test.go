package check

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// testCA is a certificate authority of the test's own.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	// leafNotAfter is when the serving certificates it issues expire.
	leafNotAfter time.Time
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kagenti-check test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leafNotAfter: cert.NotAfter.Add(-time.Hour)}
}

// serving issues a serving certificate for the DNS names and IPs in hosts; it returns the TLS
// certificate and its PEM.
func (ca *testCA) serving(t *testing.T, hosts ...string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: ca.leafNotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	pair, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	require.NoError(t, err)
	return pair, certPEM
}

// What the test injector does with an admission request.
const (
	injectProxyInit int32 = iota // adds the status annotation and proxy-init, as the injector does
	admitUnchanged               // allows it without a patch
	deny                         // refuses it
)

// injectorServer is a mutating webhook over TLS on 127.0.0.1 that the test API server calls.
func injectorServer(t *testing.T, ca *testCA, mode *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		switch mode.Load() {
		case injectProxyInit:
			patch := `[{"op":"add","path":"/spec/template/metadata/annotations","value":{"kagenti.io/injection-status":"{\"version\":\"v4\",\"hash\":\"0\"}"}},` +
				`{"op":"add","path":"/spec/template/spec/initContainers","value":[{"name":"proxy-init","image":"proxy-init:test"}]}]`
			resp.Patch = []byte(patch)
			resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
		case deny:
			resp.Allowed = false
			resp.Result = &metav1.Status{Message: "kagenti-check test injector refuses", Code: http.StatusForbidden}
		}
		review.Response = resp
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	}))
	pair, _ := ca.serving(t, "127.0.0.1")
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// registerInjector registers inject.kagenti.io at clientConfig, for labelled Deployments in
// namespaces labelled for injection, and returns the configuration's name.
func registerInjector(t *testing.T, clientConfig admissionregv1.WebhookClientConfig) string {
	t.Helper()
	name := uniqueName("kagenti-injector")
	mwc := &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name: injectorWebhook, ClientConfig: clientConfig,
			Rules: []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule: admissionregv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kagenti.io/injection": "enabled"}},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kagenti.io/inject", Operator: metav1.LabelSelectorOpExists}}},
			SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregv1.Fail),
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}
	mwcs := admin.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	_, err := mwcs.Create(context.Background(), mwc, metav1.CreateOptions{})
	require.NoError(t, err)
	deleteLater(t, func(ctx context.Context) error { return mwcs.Delete(ctx, name, metav1.DeleteOptions{}) })
	return name
}

// The injector registered by URL (it runs outside the cluster): its certificate, its dry run and
// the controller's line, as the webhook injects, admits unchanged, refuses, or is not tried.
func TestCheckInjectorRegisteredByURL(t *testing.T) {
	ns := installNamespace(t)
	ca := newTestCA(t)
	var mode atomic.Int32
	srv := injectorServer(t, ca, &mode)
	url := srv.URL + "/inject"
	cfg := registerInjector(t, admissionregv1.WebhookClientConfig{URL: &url, CABundle: ca.pem})
	opts := Options{Namespace: ns, Pillars: []string{"injector"}}

	results := runCheck(t, clients(t), opts)
	requireLine(t, results, fmt.Sprintf("✓ webhook inject.kagenti.io certificate: %s: valid until %s, signed by the caBundle of MutatingWebhookConfiguration %s",
		url, ca.leafNotAfter.UTC().Format("2006-01-02"), cfg))
	requireLine(t, results, "✓ webhook inject.kagenti.io reachable: a labelled Deployment was injected in a server dry run (proxy-init)")
	requireLine(t, results, "✓ kagenti-injector: answers at "+url+" (no Deployment in "+ns+": it runs outside the cluster)")

	mode.Store(admitUnchanged)
	requireLine(t, runCheck(t, clients(t), opts),
		"✗ webhook inject.kagenti.io reachable: a labelled Deployment in a namespace labelled kagenti.io/injection=enabled was admitted without injection\n"+
			"    fix: compare the namespaceSelector and objectSelector of MutatingWebhookConfiguration "+cfg+" with docs/injector.md")

	mode.Store(deny)
	results = runCheck(t, clients(t), opts)
	requireLine(t, results, "✗ webhook inject.kagenti.io reachable: the API server refused a labelled Deployment (server dry run): ")
	requireLine(t, results, "✗ kagenti-injector: no Deployment in "+ns+", and nothing answers at "+url+", where its webhook is registered")

	opts.ReadOnly = true
	results = runCheck(t, clients(t), opts)
	requireLine(t, results, "– webhook inject.kagenti.io reachable: not tried (--read-only)")
	requireLine(t, results, "– kagenti-injector: registered at "+url+" (no Deployment in "+ns+": it runs outside the cluster); not tried")
}

// A webhook's certificate that does not verify against its caBundle, an empty or unreadable
// caBundle, and a URL where nothing answers.
func TestCheckWebhookCertificateFailures(t *testing.T) {
	ns := installNamespace(t)
	ca := newTestCA(t)
	var mode atomic.Int32
	srv := injectorServer(t, ca, &mode)
	url := srv.URL + "/inject"
	opts := Options{Namespace: ns, Pillars: []string{"injector"}, ReadOnly: true}

	t.Run("another CA", func(t *testing.T) {
		cfg := registerInjector(t, admissionregv1.WebhookClientConfig{URL: &url, CABundle: newTestCA(t).pem})
		requireLine(t, runCheck(t, clients(t), opts),
			"✗ webhook inject.kagenti.io certificate: the certificate served for "+url+" does not verify against the caBundle of MutatingWebhookConfiguration "+cfg+": ")
	})
	t.Run("empty caBundle", func(t *testing.T) {
		cfg := registerInjector(t, admissionregv1.WebhookClientConfig{URL: &url})
		fix := requireLine(t, runCheck(t, clients(t), opts),
			"✗ webhook inject.kagenti.io certificate: the caBundle of MutatingWebhookConfiguration "+cfg+" is empty: the API server cannot verify the webhook")
		require.Contains(t, fix, "    fix: the caBundle of MutatingWebhookConfiguration "+cfg+" must hold the CA that signed the serving certificate")
	})
	t.Run("no PEM in the caBundle", func(t *testing.T) {
		cfg := registerInjector(t, admissionregv1.WebhookClientConfig{URL: &url, CABundle: []byte("not a certificate")})
		requireLine(t, runCheck(t, clients(t), opts),
			"✗ webhook inject.kagenti.io certificate: the caBundle of MutatingWebhookConfiguration "+cfg+" holds no PEM certificate")
	})
	t.Run("nothing answers", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		closed := "https://" + addr + "/inject"
		registerInjector(t, admissionregv1.WebhookClientConfig{URL: &closed, CABundle: ca.pem})
		fix := requireLine(t, runCheck(t, clients(t), opts), "✗ webhook inject.kagenti.io certificate: nothing answers TLS at "+addr+": ")
		require.Contains(t, fix, "    fix: is the webhook running? it must listen at "+closed)
	})
}

// A webhook registered by Service: its certificate is read from the Secret its Deployment names
// (the rotator's, by flag) or mounts (cert-manager's)
// (a CLI outside the cluster cannot dial a Service), and the lines when that cannot be done.
func TestCheckWebhookRegisteredByService(t *testing.T) {
	ns := installNamespace(t)
	ca := newTestCA(t)
	svcName := "kagenti-webhook"
	ref := &admissionregv1.ServiceReference{Namespace: ns, Name: svcName, Path: ptr.To("/validate"), Port: ptr.To[int32](443)}
	name := uniqueName("kagenti-validate")
	vwcs := admin.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	_, err := vwcs.Create(context.Background(), &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregv1.ValidatingWebhook{{
			Name: "validate.kagenti.io", ClientConfig: admissionregv1.WebhookClientConfig{Service: ref, CABundle: ca.pem},
			// A resource nothing creates: the API server never calls it.
			Rules: []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule: admissionregv1.Rule{APIGroups: []string{"kagenti.io"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"agentbuilds"}}}},
			SideEffects: ptr.To(admissionregv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
			FailurePolicy: ptr.To(admissionregv1.Ignore),
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	deleteLater(t, func(ctx context.Context) error { return vwcs.Delete(ctx, name, metav1.DeleteOptions{}) })
	opts := Options{Namespace: ns, Pillars: []string{"agenttrace"}, ReadOnly: true}
	where := "Service " + ns + "/" + svcName

	fix := requireLine(t, runCheck(t, clients(t), opts), "✗ webhook validate.kagenti.io certificate: Service "+ns+"/"+svcName+" does not exist")
	require.Contains(t, fix, "    fix: is the webhook running? reinstall the pillar that serves validate.kagenti.io")

	ctx := context.Background()
	_, err = admin.Kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcName},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "kagenti-webhook"}, Ports: []corev1.ServicePort{{Port: 443}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	requireLine(t, runCheck(t, clients(t), opts),
		"– webhook validate.kagenti.io certificate: the serving certificate of "+where+" is not readable here (no Secret with tls.crt named by its Deployment) (the reachability check still tests it through the API server)")

	hooks := readAll("admissionregistration.k8s.io/mutatingwebhookconfigurations", "admissionregistration.k8s.io/validatingwebhookconfigurations")
	requireLine(t, runCheck(t, asUser(t, hooks...), opts),
		"– webhook validate.kagenti.io certificate: "+svcName+"."+ns+".svc (the reachability check still tests it through the API server)")
	requireLine(t, runCheck(t, asUser(t, append(hooks, readAll("/services")...)...), opts),
		"– webhook validate.kagenti.io certificate: cannot list Deployments in "+ns+": ")

	_, certPEM := ca.serving(t, svcName+"."+ns+".svc")
	_, err = admin.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-cert"},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: []byte("unused")}}, metav1.CreateOptions{})
	require.NoError(t, err)
	valid := fmt.Sprintf("✓ webhook validate.kagenti.io certificate: %s: valid until %s, signed by the caBundle of ValidatingWebhookConfiguration %s",
		where, ca.leafNotAfter.UTC().Format("2006-01-02"), name)
	d := deployment(t, ns, "kagenti-webhook", 0)

	// As shipped: the rotator's Secret named by the controller's flag, the files in an emptyDir.
	d.Spec.Template.Spec.Containers[0].Args = []string{"--webhook", "--cert-secret=webhook-cert", "--rotator-cert-dir=/certs"}
	d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	d, err = admin.Kube.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
	require.NoError(t, err)
	requireLine(t, runCheck(t, clients(t), opts), valid)

	// With cert-manager: the Secret mounted.
	d.Spec.Template.Spec.Containers[0].Args = nil
	d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "webhook-cert"}}}}
	_, err = admin.Kube.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
	require.NoError(t, err)
	requireLine(t, runCheck(t, clients(t), opts), valid)
}

// The injector's controller line when its webhook is registered by Service without a
// Deployment, when nothing is installed, and when its Deployment is there.
func TestCheckInjectorController(t *testing.T) {
	ns := installNamespace(t)
	opts := Options{Namespace: ns, Pillars: []string{"injector"}, ReadOnly: true}

	results := runCheck(t, clients(t), opts)
	fix := requireLine(t, results, "✗ webhook inject.kagenti.io: not registered: no MutatingWebhookConfiguration has it, so nothing is injected")
	require.Contains(t, fix, "    fix: install the injector: kubectl apply -k deploy/kustomize/overlays/injector-only")
	requireLine(t, results, "✗ kagenti-injector: not installed: no Deployment "+ns+"/kagenti-injector and no webhook registration")

	t.Run("registered by Service", func(t *testing.T) {
		registerInjector(t, admissionregv1.WebhookClientConfig{Service: &admissionregv1.ServiceReference{Namespace: ns, Name: "kagenti-injector"}, CABundle: newTestCA(t).pem})
		requireLine(t, runCheck(t, clients(t), opts), "✗ kagenti-injector: its webhook is registered but no Deployment "+ns+"/kagenti-injector serves it")
	})

	deployment(t, ns, "kagenti-injector", 0)
	requireLine(t, runCheck(t, clients(t), opts), "✓ kagenti-injector: Deployment "+ns+"/kagenti-injector: 0/0 replicas ready")
}

// A user who may not list webhook configurations is told so.
func TestCheckWebhooksUnreadable(t *testing.T) {
	ns := installNamespace(t)
	c := asUser(t, readAll("apps/deployments", "apiextensions.k8s.io/customresourcedefinitions")...)
	fix := requireLine(t, runCheck(t, c, Options{Namespace: ns, Pillars: []string{"agenttrace"}, ReadOnly: true}),
		"✗ webhooks: cannot list the webhook configurations: ")
	require.Contains(t, fix, "    fix: check your access to mutating/validatingwebhookconfigurations")
}
