package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// registrarID is kagenti-tokenexchange's SPIFFE ID on kind (its service account).
const registrarID = "spiffe://cluster.local/ns/kagenti-system/sa/kagenti-tokenexchange"

// TestKindRegistrationWithoutASecret: clientAuthentication jwtSVID on kind, with real pods, the
// real SPIRE agent and the helm install's registrar (tokenexchange.registrar, the SPIRE socket by
// hostPath; hack/kind.sh registers the controller's service account with SPIRE, as an operator
// would). kagenti-tokenexchange gets its own JWT SVID from the SPIRE agent on its node and
// registers the caller's client at the dev IdP, which allows only that SPIFFE ID to register and
// verifies it against SPIRE's bundle; the client is bound to the caller's SPIFFE ID. The caller's
// outbound proxy then authenticates its exchange with the caller's JWT SVID as the client
// assertion. No Secret in the namespace and no file in the pod holds a client secret, and the IdP
// logged the SVID-authenticated registration and the client assertion.
func TestKindRegistrationWithoutASecret(t *testing.T) {
	requireKind(t)
	c := framework.Client(t)
	framework.RequirePillar(t, c, "injector")
	framework.RequirePillar(t, c, "tokenexchange")
	requireKindSPIRE(t, c)
	requireControllerFlag(t, c, "kagenti-tokenexchange", "--registrar-spiffe-socket", "tokenexchange.registrar.enabled")
	ns := framework.Namespace(t, c, "kind-noreg", map[string]string{"kagenti.io/injection": "enabled"})
	callerID := "spiffe://cluster.local/ns/" + ns + "/sa/caller"
	calleeID := "spiffe://cluster.local/ns/" + ns + "/sa/callee"
	issuer := "http://idp." + ns + ".svc:9080"

	copySPIREBundle(t, c, ns)
	// The user's token is for the caller (its SPIFFE ID, which its inbound validates); the caller's
	// client ID is the IdP's choice, which the token cannot name in advance, so the IdP does not
	// require it among the audiences.
	createKindIdP(t, c, ns, kindIdP{issuer: issuer, clients: []string{"user:user-secret:" + callerID}, spiffeBundle: true,
		args: []string{"--registrar", registrarID, "--require-client-in-audience=false"}})
	calleeHost := "callee." + ns + ".svc"
	validation := kindValidation(issuer)
	registration := kindOIDC(issuer)
	registration["clientAuthentication"] = "jwtSVID"
	createKindTokenExchange(t, c, ns, "caller-auth", map[string]any{
		"targetRef":          map[string]any{"kind": "Deployment", "name": "caller"},
		"clientRegistration": registration,
		"inbound":            map[string]any{"validation": validation},
		"outbound": map[string]any{"tokenExchange": map[string]any{
			"tokenUrl": issuer + "/oauth/token", "destinationRules": exchangeRoute(calleeHost, calleeID)}},
	})
	createKindTokenExchange(t, c, ns, "callee-auth", validatingOnly(deploymentRef("callee"), map[string]any{"validation": validation}))

	// The controller registers once the Deployment exists (it resolves the target first).
	createKindAgent(t, c, ns, "caller", map[string]string{"kagenti.io/spiffe": "enabled"}, transparentAgent)
	createKindAgent(t, c, ns, "callee", nil, transparentAgent)
	var clientID string
	t.Run("kagenti-tokenexchange registered the caller's client with its own SVID", func(t *testing.T) {
		framework.Eventually(t, 2*time.Minute, "caller-auth: ClientRegistered", func(ctx context.Context) (bool, string, error) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(tokenExchangeGVK)
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "caller-auth"}, u); err != nil {
				return false, "", err
			}
			clientID, _, _ = unstructured.NestedString(u.Object, "status", "clientRegistration", "clientId")
			spiffeID, _, _ := unstructured.NestedString(u.Object, "status", "clientRegistration", "spiffeId")
			registrar, _, _ := unstructured.NestedString(u.Object, "status", "clientRegistration", "registrar")
			return clientID != "" && spiffeID == callerID && registrar == registrarID, fmt.Sprint(u.Object["status"]), nil
		})
		if log := podLogs(t, ns, podOf(t, c, ns, "idp")); !strings.Contains(log, "registered client "+clientID) || !strings.Contains(log, `spiffe_id "`+callerID+`"`) {
			t.Fatalf("the dev IdP did not log the registration of %s bound to %s:\n%s", clientID, callerID, log)
		}
	})

	registerKindWorkload(t, ns, "caller")
	// The caller's pods run the content with the client and the SVID's audience (a pod that started
	// before the ConfigMap existed is restarted by the controller first).
	framework.Eventually(t, 3*time.Minute, "caller-auth: ConfigPropagated and StartupSettingsCurrent", func(ctx context.Context) (bool, string, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(tokenExchangeGVK)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "caller-auth"}, u); err != nil {
			return false, "", err
		}
		propagated, startup := conditionStatus(u, "ConfigPropagated"), conditionStatus(u, "StartupSettingsCurrent")
		return propagated == "True" && startup == "True", "ConfigPropagated=" + propagated + " StartupSettingsCurrent=" + startup, nil
	})
	caller := readyPodOf(t, c, ns, "caller")
	callee := readyPodOf(t, c, ns, "callee")

	t.Run("the caller's exchange is authenticated by its JWT SVID as client assertion", func(t *testing.T) {
		user := clientCredentialsToken(t, "http://"+framework.PortForward(t, ns, podOf(t, c, ns, "idp"), 9080), "user", "user-secret")
		res := kindCall(t, "http://"+framework.PortForward(t, ns, caller.Name, inboundPort), calleeHost, user)
		got := decodeReport(t, res)
		if got.Pod != callee.Name {
			t.Fatalf("answered by %q (status %d), want the callee's agent %s", got.Pod, res.Status, callee.Name)
		}
		claims := jwtClaims(t, bearer(got.Headers))
		if fmt.Sprint(claims["aud"]) != fmt.Sprint([]any{calleeID}) {
			t.Errorf("exchanged token audience %v, want [%s]", claims["aud"], calleeID)
		}
		if want := "client " + clientID + " authenticated with a JWT SVID client assertion of " + callerID; !strings.Contains(podLogs(t, ns, podOf(t, c, ns, "idp")), want) {
			t.Fatalf("the dev IdP did not log %q", want)
		}
	})

	t.Run("no client secret exists: no Secret in the namespace, no file in the pod", func(t *testing.T) {
		var secrets corev1.SecretList
		if err := c.List(context.Background(), &secrets, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets.Items {
			t.Errorf("Secret %s (keys %v) exists in the namespace", s.Name, slices.Sorted(maps.Keys(s.Data)))
		}
		files := nodeFiles(t, caller, "kagenti-shared")
		for _, f := range files {
			if strings.Contains(f, "secret") || f == "registration.json" {
				t.Errorf("the caller's shared volume holds %s (%v)", f, files)
			}
		}
		if !slices.Contains(files, "jwt_svid.token") {
			t.Errorf("the caller's shared volume has no JWT SVID: %v", files)
		}
	})
}

// requireControllerFlag fails unless the kagenti-system Deployment runs with flag (the helm
// install hack/kind.sh makes sets it with the value how names); the kustomize install skips.
func requireControllerFlag(t *testing.T, c client.Client, deployment, flag, how string) {
	t.Helper()
	var d appsv1.Deployment
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "kagenti-system", Name: deployment}, &d); err != nil {
		t.Fatal(err)
	}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, flag+"=") {
			return
		}
	}
	if os.Getenv("KAGENTI_KIND_INSTALL") == "kustomize" {
		t.Skipf("the kustomize install runs %s without %s (helm %s)", deployment, flag, how)
	}
	t.Fatalf("%s runs without %s: install with --set %s=true (hack/kind.sh does)", deployment, flag, how)
}

// podLogs are the logs of pod's containers.
func podLogs(t *testing.T, ns, pod string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(framework.Root(), "bin", "kubectl"), "--kubeconfig", framework.KubeconfigPath(),
		"-n", ns, "logs", pod, "--all-containers").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl logs %s/%s: %v: %s", ns, pod, err, out)
	}
	return string(out)
}

// nodeFiles lists a pod's emptyDir volume where the kubelet keeps it (nodeFile's directory).
func nodeFiles(t *testing.T, pod *corev1.Pod, volume string) []string {
	t.Helper()
	path := fmt.Sprintf("/var/lib/kubelet/pods/%s/volumes/kubernetes.io~empty-dir/%s", pod.UID, volume)
	out, err := exec.Command("docker", "exec", pod.Spec.NodeName, "ls", "-A", path).CombinedOutput()
	if err != nil {
		t.Fatalf("listing %s on node %s: %v: %s", path, pod.Spec.NodeName, err, out)
	}
	return strings.Fields(string(out))
}
