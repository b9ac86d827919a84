package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// The kagenti CLI (cli/) as users run it: bin/kagenti, built by `make build`, against the cluster
// under test. Its outputs are compared with goldens in testdata/cli (UPDATE_GOLDEN=1 rewrites them),
// after normalising what differs from run to run (namespaces, pod names, ages, hashes, dates).

var (
	crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
	mwcGVK = schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"}
)

func cliDir() string { return filepath.Join(framework.Root(), "e2e", "testdata", "cli") }

// cliResult is what one run of bin/kagenti printed.
type cliResult struct {
	stdout, stderr string
	code           int
}

func kagenti(t *testing.T, args ...string) cliResult {
	t.Helper()
	bin := filepath.Join(framework.Root(), "bin", "kagenti")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("bin/kagenti is missing: `make build` builds it (make e2e does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", framework.KubeconfigPath()}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running kagenti %v: %v", args, err)
	}
	t.Logf("kagenti %s → exit %d\n%s%s", strings.Join(args, " "), res.code, res.stdout, res.stderr)
	return res
}

// fixture decodes a multi-document YAML file of testdata/cli.
func fixture(t *testing.T, name string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(filepath.Join(cliDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if obj != nil {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

// installLegacyCRDs installs the legacy kinds' CRDs for the test and removes them afterwards.
func installLegacyCRDs(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	for _, crd := range fixture(t, "legacy-crds.yaml") {
		if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating CRD %s: %v", crd.GetName(), err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), crd) })
		waitEstablished(t, c, crd.GetName())
	}
}

func waitEstablished(t *testing.T, c client.Client, name string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, "CRD "+name+" established", func(ctx context.Context) (bool, string, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(crdGVK)
		if err := c.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
			return false, err.Error(), nil
		}
		return cliCondition(u, "Established") == "True", "not established yet", nil
	})
}

func cliCondition(u *unstructured.Unstructured, typ string) string {
	s, _ := cliConditionReason(u, typ)
	return s
}

func cliConditionReason(u *unstructured.Unstructured, typ string) (string, string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, raw := range conds {
		if m, ok := raw.(map[string]any); ok && m["type"] == typ {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			return s, r
		}
	}
	return "", ""
}

func getObject(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
}

// waitCondition waits until a kagenti.io object reports condition typ with the wanted status.
func waitCondition(t *testing.T, c client.Client, kind, ns, name, typ, status string) {
	t.Helper()
	gvk := schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: kind}
	framework.Eventually(t, 2*time.Minute, kind+" "+name+" "+typ+"="+status, func(ctx context.Context) (bool, string, error) {
		u, err := getObject(ctx, c, gvk, ns, name)
		if err != nil {
			return false, err.Error(), nil
		}
		got, reason := cliConditionReason(u, typ)
		return got == status, framework.Sprintf("%s=%s (%s)", typ, got, reason), nil
	})
}

var (
	normPodName  = regexp.MustCompile(`\b([a-z][-a-z0-9]*?)-[a-z0-9]{8,10}-[a-z0-9]{5}\b`)
	normAge      = regexp.MustCompile(`\b\d+(\.\d+)?[smhd](\d+[smh])? ago\b`)
	normDate     = regexp.MustCompile(`\b20\d\d-\d\d-\d\d(T\d\d:\d\d:\d\dZ)?\b`)
	normHash     = regexp.MustCompile(`\b[0-9a-f]{8,64}\b`)
	normIP       = regexp.MustCompile(`\b127\.1\.0\.\d+\b`)
	normScratch  = regexp.MustCompile(`kagenti-check-[a-z0-9]{5}`)
	normDelivery = regexp.MustCompile(`(, which run its current content|: kubelet delivers the change within about a minute)`)
)

// normalize replaces what differs from run to run.
func normalize(s, ns string) string {
	if ns != "" {
		s = strings.ReplaceAll(s, ns, "<ns>")
	}
	s = normScratch.ReplaceAllString(s, "kagenti-check-<x>")
	s = normPodName.ReplaceAllString(s, "$1-<pod>")
	s = normAge.ReplaceAllString(s, "<age> ago")
	s = normDate.ReplaceAllString(s, "<date>")
	s = normHash.ReplaceAllString(s, "<hash>")
	s = normIP.ReplaceAllString(s, "<ip>")
	s = normDelivery.ReplaceAllString(s, " <delivery>")
	return s
}

func compareCLIGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join(cliDir(), name)
	if os.Getenv("UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden %s: %v (UPDATE_GOLDEN=1 writes it)", path, err)
	}
	if string(want) != got {
		t.Errorf("%s differs (UPDATE_GOLDEN=1 rewrites it; review the diff):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// a2aCard is an (unsigned) A2A agent card as an agent serves it.
func a2aCard(name string) []byte {
	raw, _ := json.Marshal(map[string]any{
		"protocolVersion": "0.3.0", "name": name, "description": "e2e", "version": "1.0.0",
		"url": "http://" + name + ":18282", "capabilities": map[string]any{},
		"defaultInputModes": []string{"text/plain"}, "defaultOutputModes": []string{"text/plain"},
		"skills": []any{map[string]any{"id": "echo", "name": "Echo", "description": "echoes", "tags": []string{"e2e"}}},
	})
	return raw
}

func serveCards(t *testing.T, pods []corev1.Pod, port int, card []byte) {
	t.Helper()
	for _, p := range pods {
		framework.ServeOnPodIP(t, p.Status.PodIP, port, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/.well-known/agent-card.json" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(card)
		}))
	}
}

// TestCLIMigrate (a): legacy Agent objects stored in the cluster (their CRDs from a fixture) are
// migrated in place with `kagenti migrate --from-cluster --apply --delete-old`; the result is injected
// and every pillar reports on it; `kagenti describe` shows it all in one screen.
func TestCLIMigrate(t *testing.T) {
	c := framework.Client(t)
	for _, p := range []string{"injector", "tokenexchange", "agenttrace", "agentcard", "netpol", "agentbuild"} {
		framework.RequirePillar(t, c, p)
	}
	if framework.ClusterKind() != "local" {
		t.Skip("the migrated agent's card is served on its pods' loopback IPs, which only the local cluster has")
	}
	ctx := context.Background()
	installLegacyCRDs(t, c)
	ns := framework.Namespace(t, c, "cli-migrate", map[string]string{"kagenti.io/injection": "enabled"})
	for _, obj := range fixture(t, "legacy-agents.yaml") {
		obj.SetNamespace(ns)
		framework.Create(t, c, obj)
	}

	res := kagenti(t, "migrate", "--from-cluster", "-n", ns, "--apply", "--delete-old")
	if res.code != 0 {
		t.Fatalf("kagenti migrate failed (exit %d): %s", res.code, res.stderr)
	}
	for _, want := range []string{
		"server dry run: all ",
		ns + "/deployment.apps/echo created; its pods start with the injected sidecars",
		ns + "/tokenexchange.kagenti.io/echo-auth created",
		ns + "/agenttrace.kagenti.io/echo-trace created",
		ns + "/agentcard.kagenti.io/echo-card created",
		ns + "/agentbuild.kagenti.io/worker-build created",
		"agent.agent.kagenti.dev/echo deleted",
	} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("migrate output lacks %q", want)
		}
	}
	// Nothing dropped silently: what has no equivalent is listed with its reason.
	if !strings.Contains(res.stderr, "Not migrated:") || !strings.Contains(res.stderr, "AgentRuntime "+ns+"/echo") {
		t.Errorf("the not-migrated report is missing:\n%s", res.stderr)
	}

	pods := framework.PodsOf(t, c, ns, map[string]string{"app.kubernetes.io/name": "echo"}, 2)
	for _, p := range pods {
		for _, want := range injectedSidecars {
			if !strings.Contains(strings.Join(initContainerNames(&p.Spec), ","), want) {
				t.Fatalf("pod %s is not injected: init containers %v", p.Name, initContainerNames(&p.Spec))
			}
		}
	}
	serveCards(t, pods, 18282, a2aCard("echo"))

	waitCondition(t, c, "TokenExchange", ns, "echo-auth", "Ready", "True")
	waitCondition(t, c, "AgentTrace", ns, "echo-trace", "Ready", "True")
	waitCondition(t, c, "AgentCard", ns, "echo-card", "Ready", "True")
	waitCondition(t, c, "AgentCard", ns, "echo-card", "NetworkPolicyReady", "True")
	build := schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentBuild"}
	framework.Eventually(t, time.Minute, "AgentBuild worker-build reports Ready", func(ctx context.Context) (bool, string, error) {
		u, err := getObject(ctx, c, build, ns, "worker-build")
		if err != nil {
			return false, err.Error(), nil
		}
		status, reason := cliConditionReason(u, "Ready")
		// Without Tekton Pipelines (the local cluster) the honest answer is Ready=False TektonNotInstalled.
		return status == "True" || reason == "TektonNotInstalled", framework.Sprintf("Ready=%s (%s)", status, reason), nil
	})
	// The user's own AgentCard replaces the one agentcard creates for kagenti.io/type=agent workloads.
	framework.Eventually(t, time.Minute, "no auto-created AgentCard next to echo-card", func(ctx context.Context) (bool, string, error) {
		_, err := getObject(ctx, c, schema.GroupVersionKind{Group: "kagenti.io", Version: "v1alpha1", Kind: "AgentCard"}, ns, "echo-deployment-card")
		return apierrors.IsNotFound(err), "echo-deployment-card still exists", nil
	})
	for _, kind := range []string{"Agent", "AgentRuntime", "AgentCard", "AgentBuild"} {
		gvk := schema.GroupVersionKind{Group: "agent.kagenti.dev", Version: "v1alpha1", Kind: kind}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		framework.Eventually(t, time.Minute, "legacy "+kind+"s deleted", func(ctx context.Context) (bool, string, error) {
			if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
				return false, "", err
			}
			return len(list.Items) == 0, framework.Sprintf("%d left", len(list.Items)), nil
		})
	}

	desc := kagenti(t, "describe", "deployment/echo", "-n", ns)
	if desc.code != 0 {
		t.Fatalf("kagenti describe failed: %s", desc.stderr)
	}
	compareCLIGolden(t, "describe-echo.golden", normalize(desc.stdout, ns))

	js := kagenti(t, "status", "deploy", "echo", "-n", ns, "-o", "json")
	var report struct {
		Injection struct {
			Injected     bool `json:"injected"`
			PodsInjected int  `json:"podsInjected"`
		} `json:"injection"`
		Resources []struct{ Kind, Name string } `json:"resources"`
	}
	if err := json.Unmarshal([]byte(js.stdout), &report); err != nil {
		t.Fatalf("describe -o json is not JSON: %v", err)
	}
	if !report.Injection.Injected || report.Injection.PodsInjected != 2 || len(report.Resources) != 3 {
		t.Errorf("describe -o json: %+v", report)
	}

	t.Run("not injected, and why", func(t *testing.T) {
		plain := framework.Namespace(t, c, "cli-plain", nil)
		d := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "plain", "namespace": plain},
			"spec": map[string]any{
				"selector": map[string]any{"matchLabels": map[string]any{"app": "plain"}},
				"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "plain"}},
					"spec": map[string]any{"containers": []any{map[string]any{"name": "agent", "image": framework.PauseImage()}}}},
			},
		}}
		framework.Create(t, c, d)
		framework.PodsOf(t, c, plain, map[string]string{"app": "plain"}, 1)
		out := kagenti(t, "describe", "deployment", "plain", "-n", plain)
		compareCLIGolden(t, "describe-not-injected.golden", normalize(out.stdout, plain))
	})
	_ = ctx
}

// checkSetup makes the local cluster what a healthy identity setup has: an IdP Service with a ready
// endpoint where the injector's default IdP URL points, and SPIRE's CSI driver object.
func checkSetup(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	objs := []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "keycloak", Namespace: framework.SystemNamespace},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}},
	}
	slice := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"metadata": map[string]any{"name": "keycloak-e2e", "namespace": framework.SystemNamespace,
			"labels": map[string]any{"kubernetes.io/service-name": "keycloak", "endpointslice.kubernetes.io/managed-by": "e2e"}},
		"addressType": "IPv4",
		"endpoints":   []any{map[string]any{"addresses": []any{"10.96.0.80"}, "conditions": map[string]any{"ready": true}}},
		"ports":       []any{map[string]any{"name": "http", "port": int64(8080)}},
	}}
	driver := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
		"metadata": map[string]any{"name": "csi.spiffe.io"},
		"spec":     map[string]any{"attachRequired": false, "podInfoOnMount": true, "volumeLifecycleModes": []any{"Ephemeral"}},
	}}
	objs = append(objs, slice, driver)
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
	}
}

// checkArgs run every check, identity included, with the local cluster's trust bundle.
var checkArgs = []string{"check", "--identity=true", "--trust-bundle", "kagenti-system/spire-bundle"}

// TestCLICheck: `kagenti check` on the healthy local cluster, then with the injector's webhook down
// and with a caBundle that does not match its certificate; each restored afterwards.
func TestCLICheck(t *testing.T) {
	c := framework.Client(t)
	for _, p := range []string{"injector", "tokenexchange", "agenttrace", "agentcard", "agentbuild", "netpol"} {
		framework.RequirePillar(t, c, p)
	}
	checkSetup(t, c)

	t.Run("healthy", func(t *testing.T) {
		res := kagenti(t, checkArgs...)
		if res.code != 0 {
			t.Errorf("kagenti check failed on a healthy cluster (exit %d)", res.code)
		}
		compareCLIGolden(t, "check-healthy.golden", normalize(res.stdout, ""))
	})
	t.Run("webhook down", func(t *testing.T) {
		editInjectorWebhook(t, c, func(wh *admissionv1.MutatingWebhook) {
			url := "https://127.0.0.1:19499/mutate" // nothing listens there
			wh.ClientConfig.URL = &url
		})
		res := kagenti(t, checkArgs...)
		if res.code != 1 {
			t.Errorf("kagenti check: exit %d with the webhook down, want 1", res.code)
		}
		compareCLIGolden(t, "check-webhook-down.golden", normalize(res.stdout, ""))
	})
	t.Run("bad certificate", func(t *testing.T) {
		other := selfSignedCA(t)
		editInjectorWebhook(t, c, func(wh *admissionv1.MutatingWebhook) { wh.ClientConfig.CABundle = other })
		res := kagenti(t, checkArgs...)
		if res.code != 1 {
			t.Errorf("kagenti check: exit %d with a caBundle that does not match, want 1", res.code)
		}
		compareCLIGolden(t, "check-bad-certificate.golden", normalize(res.stdout, ""))
	})
}

// editInjectorWebhook changes the injector's registration for the rest of the (sub)test and restores it.
func editInjectorWebhook(t *testing.T, c client.Client, edit func(*admissionv1.MutatingWebhook)) {
	t.Helper()
	ctx := context.Background()
	var cfg admissionv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "kagenti-injector"}, &cfg); err != nil {
		t.Fatalf("the injector's webhook registration: %v", err)
	}
	original := cfg.DeepCopy()
	for i := range cfg.Webhooks {
		if cfg.Webhooks[i].Name == "inject.kagenti.io" {
			edit(&cfg.Webhooks[i])
		}
	}
	if err := c.Update(ctx, &cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var cur admissionv1.MutatingWebhookConfiguration
		if err := c.Get(context.Background(), client.ObjectKey{Name: "kagenti-injector"}, &cur); err != nil {
			t.Errorf("restoring the injector's webhook: %v", err)
			return
		}
		cur.Webhooks = original.Webhooks
		if err := c.Update(context.Background(), &cur); err != nil {
			t.Errorf("restoring the injector's webhook: %v", err)
		}
	})
}
