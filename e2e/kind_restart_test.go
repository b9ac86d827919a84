package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/e2e/framework"
)

// platformIdP is the kind install's IdP (hack/kind/dev-idp.yaml).
const platformIdP = "http://kagenti-dev-idp.kagenti-system.svc:9080"

// TestKindPodStartedBeforeItsConfigMapIsRestarted: a Deployment applied before its TokenExchange
// (a GitOps sync, `kubectl apply -f dir/` in file order) gets a pod whose identity sidecars start
// on an empty ConfigMap volume: the kubelet mounted it before the controller wrote the ConfigMap.
// Its run-time settings follow when the kubelet refreshes the volume; its startup settings (here
// outbound.trafficInterception.excludePorts, which proxy-init applies) cannot. The tokenexchange
// controller evicts that pod, its ReplicaSet starts a replacement with the ConfigMap mounted, and
// StartupSettingsCurrent turns True, with no restart by anyone else.
func TestKindPodStartedBeforeItsConfigMapIsRestarted(t *testing.T) {
	requireKind(t)
	c := framework.Client(t)
	framework.RequirePillar(t, c, "injector")
	framework.RequirePillar(t, c, "tokenexchange")
	ns := framework.Namespace(t, c, "kind-restart", map[string]string{"kagenti.io/injection": "enabled"})

	createKindAgent(t, c, ns, "early", nil, transparentAgent)
	// The authbridge running: the kubelet has mounted the volumes, without the ConfigMap.
	first := waitContainerRunning(t, c, ns, "early", "authbridge")
	applied := time.Now()
	createKindTokenExchange(t, c, ns, "early-auth", map[string]any{
		"targetRef": map[string]any{"kind": "Deployment", "name": "early"},
		// Until the kubelet brings the ConfigMap, the pod registers as the injector's defaults say
		// (Keycloak, which the kind install has no credentials for), and its native sidecar's
		// startup probe holds the pod back; the TokenExchange's content (no registration, no
		// exchange: nothing needs credentials; tokens validated against the platform's dev IdP)
		// releases it.
		"clientRegistration": map[string]any{"enabled": false},
		"inbound":            map[string]any{"validation": map[string]any{"issuer": platformIdP, "jwksUrl": platformIdP + "/keys"}},
		"outbound": map[string]any{"tokenExchange": map[string]any{"enabled": false},
			"trafficInterception": map[string]any{"excludePorts": []any{int64(5432)}}},
	})

	var replacement string
	framework.Eventually(t, 5*time.Minute, "a replacement of pod "+first.Name+" ready and StartupSettingsCurrent=True", func(ctx context.Context) (bool, string, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(tokenExchangeGVK)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "early-auth"}, u); err != nil {
			return false, "", err
		}
		startup := conditionStatus(u, "StartupSettingsCurrent")
		p := readyPodOfNow(ctx, c, ns, "early")
		if p == nil || p.UID == first.UID {
			return false, fmt.Sprintf("StartupSettingsCurrent=%s, no ready replacement yet", startup), nil
		}
		replacement = p.Name
		return startup == "True", "StartupSettingsCurrent=" + startup, nil
	})
	t.Logf("TokenExchange applied → replacement %s ready, startup settings current: %v (the kubelet's volume refresh included)",
		replacement, time.Since(applied).Round(time.Second))

	var events eventsv1.EventList
	if err := c.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var restarted []string
	for _, e := range events.Items {
		if e.Regarding.Name == "early-auth" && e.Reason == "PodRestarted" {
			restarted = append(restarted, e.Note)
		}
	}
	if len(restarted) != 1 || !strings.Contains(restarted[0], "pod "+first.Name+" started before ConfigMap early-token-exchange existed") {
		t.Fatalf("PodRestarted Events %q: want one, for pod %s", restarted, first.Name)
	}
}

// readyPodOfNow is the Running, ready, not terminating pod labelled app=name, nil when there is none.
func readyPodOfNow(ctx context.Context, c client.Client, ns, name string) *corev1.Pod {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
		return nil
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) {
			return p
		}
	}
	return nil
}
