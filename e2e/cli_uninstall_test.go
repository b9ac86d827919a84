package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// Destructive tests remove parts of Kagenti from the cluster. They run only when
// KAGENTI_E2E_DESTRUCTIVE=1: `hack/local.sh e2e` runs them as a second phase, after every other test
// passed, on the cluster it then throws away (`hack/local.sh e2e-destructive` runs them alone on a
// fresh cluster).
func requireDestructive(t *testing.T) {
	t.Helper()
	if os.Getenv("KAGENTI_E2E_DESTRUCTIVE") != "1" {
		t.Skip("destructive (removes Kagenti from the cluster): runs in the second phase of hack/local.sh e2e, or with KAGENTI_E2E_DESTRUCTIVE=1 on a cluster you can throw away")
	}
}

func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the injector's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func kubectl(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(framework.Root(), "bin", "kubectl"), append([]string{"--kubeconfig", framework.KubeconfigPath()}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
}

// TestDestructiveCheckCRDMissing: `kagenti check` names a missing CRD and how to install it.
func TestDestructiveCheckCRDMissing(t *testing.T) {
	requireDestructive(t)
	c := framework.Client(t)
	for _, p := range []string{"injector", "tokenexchange", "agenttrace", "agentcard", "agentbuild", "netpol"} {
		framework.RequirePillar(t, c, p)
	}
	checkSetup(t, c)
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(crdGVK)
	crd.SetName("agentbuilds.kagenti.io")
	if err := c.Delete(context.Background(), crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kubectl(t, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(framework.Root(), "deploy", "crds", "agentbuild"))
		waitEstablished(t, c, "agentbuilds.kagenti.io")
	})
	framework.Eventually(t, time.Minute, "the AgentBuild CRD gone", func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKey{Name: crd.GetName()}, crd.DeepCopy())
		return apierrors.IsNotFound(err), "still there", nil
	})
	res := kagenti(t, checkArgs...)
	if res.code != 1 {
		t.Errorf("kagenti check: exit %d with a CRD missing, want 1", res.code)
	}
	compareCLIGolden(t, "check-crd-missing.golden", normalize(res.stdout, ""))
}

// podState is what must not change across `kagenti uninstall`: which pods exist and how often
// their containers restarted.
func podState(t *testing.T, c client.Client, ns string) map[string]int32 {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, p := range pods.Items {
		var restarts int32
		for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			restarts += s.RestartCount
		}
		out[p.Name+"/"+string(p.UID)] = restarts
	}
	return out
}

// TestDestructiveUninstall (b): with injected workloads, cards, policies and traces in place,
// `kagenti uninstall` removes Kagenti without deleting or restarting a pod, leaves every Deployment
// available and no NetworkPolicy behind, and the API refuses nothing afterwards; re-registered, the
// injector then undoes its injection under `kagenti uninstall --uninject`, restoring the user's pod
// templates byte for byte.
func TestDestructiveUninstall(t *testing.T) {
	requireDestructive(t)
	c := framework.Client(t)
	for _, p := range []string{"injector", "tokenexchange", "agenttrace", "agentcard", "netpol"} {
		framework.RequirePillar(t, c, p)
	}
	ctx := context.Background()
	ns := framework.Namespace(t, c, "cli-uninstall", map[string]string{"kagenti.io/injection": "enabled"})

	// The user's workload, as they wrote it.
	labels := map[string]string{"app": "keeper"}
	user := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "keeper", Namespace: ns, Labels: map[string]string{"kagenti.io/inject": "enabled", "kagenti.io/type": "agent"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"team": "e2e"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "agent", Image: framework.PauseImage(),
					Ports: []corev1.ContainerPort{{Name: "a2a", ContainerPort: 18283}},
					Env:   []corev1.EnvVar{{Name: "MODE", Value: "keep"}},
				}}},
			},
		},
	}
	framework.Create(t, c, user.DeepCopy())
	auth := map[string]any{"targetRef": map[string]any{"kind": "Deployment", "name": "keeper"}, "spiffe": map[string]any{"trustDomain": "e2e.example.com"}}
	if framework.ClusterKind() == "kind" {
		// Real pods start the agent only once the sidecars are ready, and they are ready once they
		// have registered and fetched the IdP's keys: the kind install's dev IdP (hack/kind.sh).
		idp := "http://kagenti-dev-idp." + framework.SystemNamespace + ".svc:9080"
		auth["clientRegistration"] = map[string]any{"provider": "oidc", "oidc": map[string]any{
			"issuer": idp, "tokenUrl": idp + "/oauth/token", "jwksUrl": idp + "/keys", "registrationUrl": idp + "/register"}}
		auth["inbound"] = map[string]any{"validation": map[string]any{"issuer": idp, "jwksUrl": idp + "/keys"}}
	}
	for _, obj := range []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "kagenti.io/v1alpha1", "kind": "TokenExchange", "metadata": map[string]any{"name": "keeper-auth", "namespace": ns},
			"spec": auth}},
		{Object: map[string]any{"apiVersion": "kagenti.io/v1alpha1", "kind": "AgentTrace", "metadata": map[string]any{"name": "keeper-trace", "namespace": ns},
			"spec": map[string]any{"targetRef": map[string]any{"kind": "Deployment", "name": "keeper"}, "exporters": []any{map[string]any{"type": "otlp", "endpoint": "otel-collector.observability:4317"}}}}},
	} {
		framework.Create(t, c, obj)
	}
	pods := framework.PodsOf(t, c, ns, labels, 2)
	if len(initContainerNames(&pods[0].Spec)) == 0 {
		t.Fatalf("pod %s is not injected", pods[0].Name)
	}
	waitCondition(t, c, "TokenExchange", ns, "keeper-auth", "Ready", "True")
	waitCondition(t, c, "AgentTrace", ns, "keeper-trace", "Ready", "True")
	// The auto-created card finds no card on the pods: unverified, so netpol writes a restrictive policy.
	waitCondition(t, c, "AgentCard", ns, "keeper-deployment-card", "NetworkPolicyReady", "True")
	var np networkingv1.NetworkPolicy
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keeper-agent-policy"}, &np); err != nil {
		t.Fatalf("netpol's policy: %v", err)
	}
	if np.Annotations["kagenti.io/policy"] != "restrictive" {
		t.Fatalf("policy %s is %q, want restrictive", np.Name, np.Annotations["kagenti.io/policy"])
	}
	var injectorHook admissionv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "kagenti-injector"}, &injectorHook); err != nil {
		t.Fatal(err)
	}
	before := podState(t, c, ns)

	// --dry-run changes nothing.
	dry := kagenti(t, "uninstall", "--dry-run")
	if dry.code != 0 || !strings.Contains(dry.stdout, "dry run: nothing is changed") || !strings.Contains(dry.stdout, "networkpolicy.networking.k8s.io/keeper-agent-policy -n "+ns+" (restrictive)") {
		t.Fatalf("uninstall --dry-run: exit %d\n%s", dry.code, dry.stdout)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "kagenti-injector"}, &admissionv1.MutatingWebhookConfiguration{}); err != nil {
		t.Fatalf("uninstall --dry-run removed the webhook registration: %v", err)
	}

	res := kagenti(t, "uninstall")
	if res.code != 0 {
		t.Fatalf("kagenti uninstall: exit %d: %s", res.code, res.stderr)
	}
	if after := podState(t, c, ns); !equalStates(before, after) {
		t.Errorf("pods were deleted or restarted:\nbefore %v\nafter  %v", before, after)
	}
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keeper"}, &d); err != nil {
		t.Fatal(err)
	}
	if d.Status.AvailableReplicas != 2 {
		t.Errorf("Deployment keeper: %d available replicas after uninstall, want 2", d.Status.AvailableReplicas)
	}
	var policies networkingv1.NetworkPolicyList
	if err := c.List(ctx, &policies); err != nil {
		t.Fatal(err)
	}
	for _, p := range policies.Items {
		t.Errorf("NetworkPolicy %s/%s is left after uninstall", p.Namespace, p.Name)
	}
	for _, name := range []string{"keeper-token-exchange", "keeper-trace"} {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
			t.Errorf("ConfigMap %s, which the injected sidecars read, was not kept: %v", name, err)
		} else if len(cm.OwnerReferences) > 0 {
			t.Errorf("kept ConfigMap %s is still owned by %v: the garbage collector may delete it", name, cm.OwnerReferences)
		}
	}
	// The API refuses nothing: a labelled workload is created (no webhook left to fail), an
	// existing one updated.
	fresh := user.DeepCopy()
	fresh.Name = "after-uninstall"
	fresh.Spec.Selector.MatchLabels = map[string]string{"app": "after-uninstall"}
	fresh.Spec.Template.Labels = map[string]string{"app": "after-uninstall"}
	framework.Create(t, c, fresh)
	if _, ok := fresh.Spec.Template.Annotations["kagenti.io/injection-status"]; ok {
		t.Error("a workload created after uninstall was injected")
	}
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"e2e/updated":"after-uninstall"}}}`))
	if err := c.Patch(ctx, &d, patch); err != nil {
		t.Errorf("updating a workload after uninstall: %v", err)
	}

	t.Run("--uninject restores the templates", func(t *testing.T) {
		if framework.ClusterKind() == "kind" {
			// On kind the injector ran in the cluster: uninstall removed its Deployment and Service,
			// so registering its webhook again points at nothing (the local cluster runs it as a
			// process outside, still there).
			t.Skip("needs the injector still running after uninstall: local cluster only")
		}
		// Register the (still running) injector again, as a re-installation would.
		again := injectorHook.DeepCopy()
		again.ResourceVersion, again.UID, again.ManagedFields, again.CreationTimestamp = "", "", nil, metav1.Time{}
		framework.Create(t, c, again)
		res := kagenti(t, "uninstall", "--uninject")
		if res.code != 0 {
			t.Fatalf("kagenti uninstall --uninject: exit %d: %s", res.code, res.stderr)
		}
		if !strings.Contains(res.stdout, "deployment.apps/keeper -n "+ns+" (its pods roll once)") {
			t.Errorf("uninstall --uninject does not say the pods roll:\n%s", res.stdout)
		}
		// What the API server makes of the user's own Deployment: a server dry run of it under
		// another name, without the injection label (so without the webhook).
		plain := user.DeepCopy()
		plain.Name = "keeper-as-written"
		delete(plain.Labels, "kagenti.io/inject")
		if err := c.Create(ctx, plain, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		var got appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keeper"}, &got); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(plain.Spec.Template)
		have, _ := json.Marshal(got.Spec.Template)
		if !bytes.Equal(want, have) {
			t.Errorf("the pod template after uninject differs from the user's:\nwant %s\nhave %s", want, have)
		}
		framework.PodsOf(t, c, ns, labels, 2)
	})
}

func equalStates(a, b map[string]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
