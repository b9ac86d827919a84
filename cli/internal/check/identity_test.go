package check

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// injectorConfigMap writes the injector's configuration in ns.
func writeInjectorConfig(t *testing.T, ns, config string) {
	t.Helper()
	cms := admin.Kube.CoreV1().ConfigMaps(ns)
	ctx := context.Background()
	_ = cms.Delete(ctx, injectorConfigMap, metav1.DeleteOptions{})
	_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: injectorConfigMap}, Data: map[string]string{injectorConfigKey: config}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// The identity checks run with --identity=true, or with auto when a workload is labelled
// kagenti.io/spiffe=enabled; otherwise one line says why they are skipped.
func TestCheckIdentityWhenUsed(t *testing.T) {
	ns := installNamespace(t)
	opts := Options{Namespace: ns, Pillars: []string{"injector"}, ReadOnly: true, TrustBundle: ns + "/bundle"}

	opts.Identity = "false"
	requireLine(t, runCheck(t, clients(t), opts), "– identity: --identity=false: the SPIRE checks (CSI driver, trust bundle) are skipped (--identity=true runs them)")

	opts.Identity = "auto"
	results := runCheck(t, clients(t), opts)
	requireLine(t, results, "– identity: no workload is labelled kagenti.io/spiffe=enabled: the SPIRE checks (CSI driver, trust bundle) are skipped")
	requireNoLine(t, results, "✗ CSIDriver")

	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "spiffe-agent", Labels: map[string]string{labelSpiffe: "enabled"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "a:1"}}}}},
	}
	deps := admin.Kube.AppsV1().Deployments(ns)
	_, err := deps.Create(context.Background(), d, metav1.CreateOptions{})
	require.NoError(t, err)
	deleteLater(t, func(ctx context.Context) error { return deps.Delete(ctx, d.Name, metav1.DeleteOptions{}) })
	results = runCheck(t, clients(t), opts)
	requireNoLine(t, results, "– identity:")
	requireLine(t, results, "✗ trust bundle ConfigMap "+ns+"/bundle: missing")
}

// The SPIRE CSI driver: missing, installed, unreadable; and no CSI driver with a hostPath socket.
func TestCheckCSIDriver(t *testing.T) {
	ns := installNamespace(t)
	driver := uniqueName("csi.spiffe.test")
	writeInjectorConfig(t, ns, "spireSocket:\n  type: csi\n  csiDriver: "+driver+"\n")
	opts := Options{Namespace: ns, Pillars: []string{"injector"}, ReadOnly: true, Identity: "true", TrustBundle: ns + "/bundle"}

	fix := requireLine(t, runCheck(t, clients(t), opts), "✗ CSIDriver "+driver+": not installed: pods that mount the SPIRE agent socket through it cannot start")
	require.Contains(t, fix, "    fix: install SPIRE with its CSI driver (spiffe-csi-driver)")

	drivers := admin.Kube.StorageV1().CSIDrivers()
	_, err := drivers.Create(context.Background(), &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: storagev1.CSIDriverSpec{PodInfoOnMount: ptr.To(true), VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	deleteLater(t, func(ctx context.Context) error { return drivers.Delete(ctx, driver, metav1.DeleteOptions{}) })
	requireLine(t, runCheck(t, clients(t), opts), "✓ CSIDriver "+driver+": installed (the injected spire-agent-socket volume uses it)")

	c := asUser(t, readAll("/configmaps", "apps/deployments", "admissionregistration.k8s.io/mutatingwebhookconfigurations",
		"admissionregistration.k8s.io/validatingwebhookconfigurations", "/namespaces")...)
	requireLine(t, runCheck(t, c, opts), "✗ CSIDriver "+driver+": cannot read it: ")

	writeInjectorConfig(t, ns, "spireSocket:\n  type: hostPath\n")
	results := runCheck(t, clients(t), opts)
	requireLine(t, results, "– SPIRE agent socket: from a hostPath (spireSocket.type hostPath): no CSI driver needed")
	requireNoLine(t, results, "✓ CSIDriver")
}

// The trust bundle agentcard verifies against: named by --trust-bundle or by the agentcard
// Deployment's flags; missing, without its key, present, unreadable.
func TestCheckTrustBundle(t *testing.T) {
	ns := installNamespace(t)
	writeInjectorConfig(t, ns, "spireSocket:\n  type: hostPath\n")
	opts := Options{Namespace: ns, Pillars: []string{"injector"}, ReadOnly: true, Identity: "true", TrustBundle: ns + "/bundle"}
	cms := admin.Kube.CoreV1().ConfigMaps(ns)
	ctx := context.Background()

	fix := requireLine(t, runCheck(t, clients(t), opts), "✗ trust bundle ConfigMap "+ns+"/bundle: missing: AgentCard signatures cannot be verified (SignatureVerified=False, NoTrustBundle)")
	require.Contains(t, fix, "    fix: SPIRE's k8sbundle notifier publishes it")

	_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bundle"}, Data: map[string]string{"other": "x"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	requireLine(t, runCheck(t, clients(t), opts), "✗ trust bundle ConfigMap "+ns+"/bundle: has no key bundle.crt")

	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "spire-ca"}, Data: map[string]string{"ca.pem": "-----BEGIN CERTIFICATE-----"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	deployment(t, ns, "kagenti-agentcard", 0, "--trust-bundle-configmap="+ns+"/spire-ca", "--trust-bundle-key=ca.pem")
	requireLine(t, runCheck(t, clients(t), opts), "✓ trust bundle ConfigMap "+ns+"/spire-ca: present (key ca.pem)")

	c := asUser(t, readAll("apps/deployments", "storage.k8s.io/csidrivers", "admissionregistration.k8s.io/mutatingwebhookconfigurations",
		"admissionregistration.k8s.io/validatingwebhookconfigurations", "/namespaces", "/services")...)
	fix = requireLine(t, runCheck(t, c, opts), "✗ trust bundle ConfigMap "+ns+"/spire-ca: cannot read it: ")
	require.Contains(t, fix, "    fix: check your access to configmaps in "+ns)
}

// The IdP the sidecars register with: a URL that is none, a cluster Service name that does not
// exist, has no ready endpoints, has some, or is an ExternalName; a host in DNS or not in it.
func TestCheckIdP(t *testing.T) {
	ns := installNamespace(t)
	opts := Options{Namespace: ns, Pillars: []string{"injector"}, ReadOnly: true}
	ctx := context.Background()
	source := "(from ConfigMap " + ns + "/kagenti-injector)"
	idp := func(url string) { writeInjectorConfig(t, ns, "identity:\n  idpURL: "+url+"\n") }

	requireLine(t, runCheck(t, clients(t), opts), "✗ IdP http://keycloak.kagenti-system.svc:8080: does not resolve: no Service kagenti-system/keycloak (from the injector's built-in defaults (no ConfigMap "+ns+"/kagenti-injector))")

	idp(`"http://"`)
	fix := requireLine(t, runCheck(t, clients(t), opts), "✗ IdP http://: not a URL "+source)
	require.Contains(t, fix, "    fix: identity.idpURL in the injector's configuration (ConfigMap "+ns+"/kagenti-injector) must name the IdP")

	url := "http://keycloak." + ns + ".svc:8080"
	idp(url)
	requireLine(t, runCheck(t, clients(t), opts), "✗ IdP "+url+": does not resolve: no Service "+ns+"/keycloak "+source)

	svcs := admin.Kube.CoreV1().Services(ns)
	_, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keycloak"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "keycloak"}, Ports: []corev1.ServicePort{{Port: 8080}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	fix = requireLine(t, runCheck(t, clients(t), opts), "✗ IdP "+url+": resolves to Service "+ns+"/keycloak, which has no ready endpoints")
	require.Contains(t, fix, "    fix: start the IdP behind Service "+ns+"/keycloak")

	slices := admin.Kube.DiscoveryV1().EndpointSlices(ns)
	_, err = slices.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "keycloak-1", Labels: map[string]string{serviceNameLabelKey: "keycloak"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
			{Addresses: []string{"10.0.0.3"}},
		}}, metav1.CreateOptions{})
	require.NoError(t, err)
	requireLine(t, runCheck(t, clients(t), opts), "✓ IdP "+url+": resolves to Service "+ns+"/keycloak with 2 ready endpoint(s) "+source)

	t.Run("unreadable", func(t *testing.T) {
		base := readAll("/configmaps", "apps/deployments", "admissionregistration.k8s.io/mutatingwebhookconfigurations",
			"admissionregistration.k8s.io/validatingwebhookconfigurations", "/namespaces")
		fix := requireLine(t, runCheck(t, asUser(t, base...), opts), "✗ IdP "+url+": cannot read Service "+ns+"/keycloak: ")
		require.Contains(t, fix, "    fix: check your access to services in "+ns)
		fix = requireLine(t, runCheck(t, asUser(t, append(base, readAll("/services")...)...), opts),
			"✗ IdP "+url+": cannot read the endpoints of Service "+ns+"/keycloak: ")
		require.Contains(t, fix, "    fix: check your access to endpointslices in "+ns)
	})

	ext := "http://external." + ns + ".svc"
	_, err = svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "external"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	idp(ext)
	requireLine(t, runCheck(t, clients(t), opts), "✓ IdP "+ext+": localhost resolves to ")

	idp("http://localhost:8080")
	requireLine(t, runCheck(t, clients(t), opts), "✓ IdP http://localhost:8080: localhost resolves to ")

	// .invalid never resolves (RFC 6761).
	idp("https://idp.kagenti-check.invalid")
	requireLine(t, runCheck(t, clients(t), opts), "✗ IdP https://idp.kagenti-check.invalid: idp.kagenti-check.invalid does not resolve "+source+": ")
}
