package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/controller"
	"github.com/kagenti/platform/tokenexchange/internal/resources"
)

func duckRef(kind, name string) duck.TargetRef { return duck.TargetRef{Kind: kind, Name: name} }

func getCM(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	return cm, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm)
}

func TestTargetNotFoundThenNotInjectedThenActive(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, k8s.Create(ctx, tokenExchange(ns, "tx", "agent")))

	te := waitCondition(t, ns, "tx", v1alpha1.ConditionTargetResolved, metav1.ConditionFalse, duck.ReasonTargetNotFound)
	assert.Equal(t, v1alpha1.PhasePending, te.Status.Phase)
	assert.Equal(t, duck.ReasonTargetNotFound, condition(te, v1alpha1.ConditionReady).Reason)
	assert.Contains(t, te.Status.Message, `Deployment "agent" not found`)

	// The workload appears, not injected yet: the ConfigMap is written, Ready says why it is inert.
	d := deployment(ns, "agent", 2, false)
	must(t, k8s.Create(ctx, d))
	te = waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNotInjected)
	assert.Equal(t, v1alpha1.PhasePending, te.Status.Phase)
	assert.Contains(t, condition(te, v1alpha1.ConditionReady).Message, "kagenti.io/injection-status")
	assert.Equal(t, metav1.ConditionTrue, condition(te, v1alpha1.ConditionTargetResolved).Status)
	assert.Equal(t, metav1.ConditionTrue, condition(te, v1alpha1.ConditionConfigMapReady).Status)
	assert.Equal(t, "agent-token-exchange", te.Status.ConfigMapName)
	assert.Equal(t, "immediateCaller", te.Status.Delegation, "no delegation set: only the immediate caller is known")
	_, err := getCM(ctx, ns, "agent-token-exchange")
	require.NoError(t, err)
	eventually(t, "NotInjected event", func(ctx context.Context) (bool, string) {
		var list eventsv1.EventList
		must(t, k8s.List(ctx, &list, client.InNamespace(ns)))
		for _, e := range list.Items {
			if e.Regarding.Name == "tx" && e.Reason == v1alpha1.ReasonNotInjected && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(list.Items))
	})

	// The injector injects it: Active without touching the TokenExchange.
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(d), d))
	markInjected(&d.Spec.Template)
	must(t, k8s.Update(ctx, d))
	te = waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)
	assert.Equal(t, v1alpha1.PhaseActive, te.Status.Phase)
	assert.Equal(t, int32(0), te.Status.ConfiguredPods)
	require.NotNil(t, te.Status.IdentityStatus)
	assert.False(t, te.Status.IdentityStatus.SpiffeEnabled)
}

func TestUnsupportedKinds(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-a-workload", Namespace: ns}}
	must(t, k8s.Create(ctx, cm))

	for name, ref := range map[string]duck.TargetRef{
		"no-template": {APIVersion: "v1", Kind: "ConfigMap", Name: "not-a-workload"},
		"not-served":  {APIVersion: "example.com/v1", Kind: "Widget", Name: "w"},
	} {
		te := &v1alpha1.TokenExchange{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.TokenExchangeSpec{TargetRef: ref}}
		must(t, k8s.Create(ctx, te))
		got := waitCondition(t, ns, name, v1alpha1.ConditionTargetResolved, metav1.ConditionFalse, duck.ReasonUnsupportedKind)
		assert.Equal(t, v1alpha1.PhaseError, got.Status.Phase, name)
		assert.Equal(t, duck.ReasonUnsupportedKind, condition(got, v1alpha1.ConditionReady).Reason, name)
	}
}

func TestConflictOldestWins(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, true)))
	first := tokenExchange(ns, "first", "agent")
	must(t, k8s.Create(ctx, first))
	waitCondition(t, ns, "first", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)
	cm, err := getCM(ctx, ns, "agent-token-exchange")
	require.NoError(t, err)
	before := cm.Data[resources.ConfigKey]

	second := tokenExchange(ns, "second", "agent")
	second.Spec.Spiffe = &v1alpha1.SpiffeSpec{TrustDomain: "other.example"}
	must(t, k8s.Create(ctx, second))
	te := waitCondition(t, ns, "second", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConflict)
	assert.Equal(t, v1alpha1.PhaseError, te.Status.Phase)
	assert.Contains(t, te.Status.Message, `TokenExchange "first"`)
	assert.Equal(t, v1alpha1.ReasonConflict, condition(te, v1alpha1.ConditionConfigMapReady).Reason)
	assert.Empty(t, te.Status.ConfigMapName)
	// The winner's ConfigMap is untouched.
	cm, err = getCM(ctx, ns, "agent-token-exchange")
	require.NoError(t, err)
	assert.Equal(t, before, cm.Data[resources.ConfigKey])
	assert.Equal(t, "first", metav1.GetControllerOf(cm).Name)
	waitCondition(t, ns, "first", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)

	// The winner goes; the garbage collector (absent in envtest) deletes its ConfigMap. The test
	// plays the collector until the second TokenExchange takes over: a reconcile of "first" still in
	// flight from the cache may write the ConfigMap once more after the deletion, and the collector
	// deletes that one too (its owner no longer exists).
	must(t, k8s.Delete(ctx, first))
	eventually(t, "second takes over once the collector removed first's ConfigMap", func(ctx context.Context) (bool, string) {
		if cm, err := getCM(ctx, ns, "agent-token-exchange"); err == nil {
			if owner := metav1.GetControllerOf(cm); owner != nil && owner.Name == "first" {
				_ = k8s.Delete(ctx, cm)
				return false, "deleted a ConfigMap controlled by first"
			}
		}
		var got v1alpha1.TokenExchange
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "second"}, &got); err != nil {
			return false, err.Error()
		}
		ready := condition(&got, v1alpha1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != v1alpha1.ReasonConfigured {
			return false, fmt.Sprintf("second Ready: %+v", ready)
		}
		return true, ""
	})
	waitCondition(t, ns, "second", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)
	cm, err = getCM(ctx, ns, "agent-token-exchange")
	require.NoError(t, err)
	assert.Equal(t, "second", metav1.GetControllerOf(cm).Name)
	assert.Contains(t, cm.Data[resources.ConfigKey], "trustDomain: other.example")
}

func TestSpecChangeUpdatesConfigMapWithoutRestart(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	d := deployment(ns, "agent", 2, true)
	must(t, k8s.Create(ctx, d))
	history := watchReady(t, ns, "tx")
	must(t, k8s.Create(ctx, tokenExchange(ns, "tx", "agent")))
	te := waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)
	readySince := condition(te, v1alpha1.ConditionReady).LastTransitionTime
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(d), d))
	gen, template := d.Generation, d.Spec.Template.DeepCopy()

	must(t, updateRetrying(ctx, te, func() {
		te.Spec.Outbound = &v1alpha1.OutboundSpec{TokenExchange: &v1alpha1.OutboundTokenExchangeSpec{
			DestinationRules: []v1alpha1.DestinationRule{{Match: v1alpha1.DestinationMatch{Host: "api.example.com"},
				Target: &v1alpha1.ExchangeTarget{Audience: "api"}}}}}
	}))
	eventually(t, "ConfigMap has the new rule", func(ctx context.Context) (bool, string) {
		cm, err := getCM(ctx, ns, "agent-token-exchange")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(cm.Data[resources.ConfigKey], "api.example.com"), cm.Data[resources.ConfigKey]
	})
	te = waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)
	assert.Equal(t, readySince, condition(te, v1alpha1.ConditionReady).LastTransitionTime, "lastTransitionTime only moves on a status change")
	unsteady, states := history.wasUnsteadyAfterReady()
	assert.False(t, unsteady, "once Ready, a TokenExchange whose spec change applies cleanly stays Ready since the same time; stored states:\n%s", states)

	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(d), d))
	assert.Equal(t, gen, d.Generation, "the workload is not changed")
	assert.True(t, equality.Semantic.DeepEqual(template, &d.Spec.Template), "the pod template is not changed: no restart")
}

func TestConfigMapOwnership(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, true)))
	must(t, k8s.Create(ctx, tokenExchange(ns, "tx", "agent")))
	te := waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)
	cm, err := getCM(ctx, ns, "agent-token-exchange")
	require.NoError(t, err)
	ref := metav1.GetControllerOf(cm)
	require.NotNil(t, ref, "deleting the TokenExchange garbage-collects the ConfigMap through this reference")
	assert.Equal(t, te.UID, ref.UID)
	assert.Equal(t, "TokenExchange", ref.Kind)
	assert.Equal(t, ptr.To(true), ref.BlockOwnerDeletion)
	assert.Equal(t, controller.Name, cm.Labels[contract.ManagedByLabel])
	assert.NotEmpty(t, cm.Annotations[contract.ContentHashAnnotation])

	// A user edit is reverted.
	must(t, updateRetrying(ctx, cm, func() { cm.Data[resources.ConfigKey] = "tampered" }))
	eventually(t, "ConfigMap restored", func(ctx context.Context) (bool, string) {
		cm, err := getCM(ctx, ns, "agent-token-exchange")
		if err != nil {
			return false, err.Error()
		}
		return cm.Data[resources.ConfigKey] != "tampered", "still tampered"
	})
}

func TestForeignConfigMapIsNotTakenOver(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, true)))
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "agent-token-exchange", Namespace: ns}, Data: map[string]string{"x": "y"}}
	must(t, k8s.Create(ctx, mine))
	must(t, k8s.Create(ctx, tokenExchange(ns, "tx", "agent")))
	te := waitCondition(t, ns, "tx", v1alpha1.ConditionConfigMapReady, metav1.ConditionFalse, v1alpha1.ReasonConfigMapNotOwned)
	assert.Equal(t, v1alpha1.PhaseError, te.Status.Phase)
	assert.Contains(t, te.Status.Message, "agent-token-exchange")
	cm, err := getCM(ctx, ns, "agent-token-exchange")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"x": "y"}, cm.Data)
}

// TestStoredTemplateBombIsReportedNotExecuted: a TokenExchange stored before the CRD had its
// clientNameTemplate rule (the API server does not re-validate stored objects when a CRD changes)
// reaches the reconciler, which reports it as InvalidSpec without executing it and writes nothing.
// The old text/template validator allocated 6 GB per reconcile of this template.
func TestStoredTemplateBombIsReportedNotExecuted(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, true)))
	te := tokenExchange(ns, "tx", "agent")
	te.Labels = map[string]string{SkipWebhookLabel: "true"} // the webhook would deny it too
	te.Spec.ClientRegistration = &v1alpha1.ClientRegistrationSpec{Keycloak: &v1alpha1.KeycloakSpec{ClientNameTemplate: templateBomb(t)}}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	createWithoutTemplateRule(t, te)
	got := waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	runtime.ReadMemStats(&after)
	assert.Equal(t, v1alpha1.PhaseError, got.Status.Phase)
	assert.Contains(t, got.Status.Message, "spec.clientRegistration.keycloak.clientNameTemplate")
	assert.Contains(t, got.Status.Message, "not a placeholder")
	assert.Equal(t, v1alpha1.ReasonInvalidSpec, condition(got, v1alpha1.ConditionConfigMapReady).Reason)
	_, err := getCM(ctx, ns, "agent-token-exchange")
	assert.True(t, apierrors.IsNotFound(err), "nothing is written for an invalid spec")
	// Everything this test process allocated meanwhile (API server client, manager, reconciles):
	// far below what one execution of the bomb takes.
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated while the bomb was stored and reconciled: %d MiB", allocated>>20)
	assert.Less(t, allocated, uint64(1<<30))

	// Fixing it recovers.
	must(t, updateRetrying(ctx, got, func() { got.Spec.ClientRegistration.Keycloak.ClientNameTemplate = "{{.Namespace}}/agent-{{.PodName}}" }))
	waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)
}

// TestStoredTakeoverTemplateIsInvalidSpec is issue 26's takeover in a TokenExchange stored before
// the CRD had its namespace rule: the controller refuses it (InvalidSpec, with the field path)
// and writes no ConfigMap, so no sidecar ever registers under team-b's client name.
func TestStoredTakeoverTemplateIsInvalidSpec(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, true)))
	te := tokenExchange(ns, "tx", "agent")
	te.Labels = map[string]string{SkipWebhookLabel: "true"} // the webhook would deny it too
	te.Spec.ClientRegistration = &v1alpha1.ClientRegistrationSpec{Keycloak: &v1alpha1.KeycloakSpec{ClientNameTemplate: "team-b/agent"}}
	createWithoutTemplateRule(t, te)
	got := waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	assert.Contains(t, got.Status.Message, `spec.clientRegistration.keycloak.clientNameTemplate: Invalid value: "team-b/agent": must start with {{.Namespace}} followed by '/'`)
	_, err := getCM(ctx, ns, "agent-token-exchange")
	assert.True(t, apierrors.IsNotFound(err), "nothing is written for an invalid spec")
}

// templateBomb is the template of issue 12 that made Go's text/template allocate 6 GB.
func templateBomb(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "tokenexchange", "api", "v1alpha1", "testdata", "template-bomb.txt"))
	must(t, err)
	return string(b)
}

func TestAPIServerRejectsTemplateBomb(t *testing.T) {
	ns := namespace(t)
	te := tokenExchange(ns, "tx", "agent")
	te.Spec.ClientRegistration = &v1alpha1.ClientRegistrationSpec{Keycloak: &v1alpha1.KeycloakSpec{ClientNameTemplate: templateBomb(t)}}
	err := k8s.Create(context.Background(), te)
	require.Error(t, err)
	assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
	assert.Contains(t, err.Error(), "spec.clientRegistration.keycloak.clientNameTemplate")
	assert.Contains(t, err.Error(), "functions, pipelines and variables are not supported")
	assert.NotContains(t, err.Error(), "admission webhook", "the CRD schema rejects it before the webhook is called")
}

// createWithoutTemplateRule stores te as a TokenExchange written before the CRD had the
// clientNameTemplate CEL rule: it takes the rule out of the installed CRD, creates te, and puts
// the CRD back, waiting each time until the API server serves the changed schema.
func createWithoutTemplateRule(t *testing.T, te *v1alpha1.TokenExchange) {
	t.Helper()
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	must(t, k8s.Get(ctx, client.ObjectKey{Name: "tokenexchanges.kagenti.io"}, crd))
	original := crd.DeepCopy()
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	cr := spec.Properties["clientRegistration"]
	kc := cr.Properties["keycloak"]
	tmpl := kc.Properties["clientNameTemplate"]
	tmpl.XValidations = nil
	kc.Properties["clientNameTemplate"] = tmpl
	cr.Properties["keycloak"] = kc
	spec.Properties["clientRegistration"] = cr
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	must(t, k8s.Update(ctx, crd))
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &apiextensionsv1.CustomResourceDefinition{}
			if err := k8s.Get(ctx, client.ObjectKey{Name: original.Name}, cur); err != nil {
				return err
			}
			cur.Spec = original.Spec
			return k8s.Update(ctx, cur)
		}))
		eventually(t, "the API server applies the clientNameTemplate rule again", func(ctx context.Context) (bool, string) {
			err := k8s.Create(ctx, te.DeepCopy(), client.DryRunAll)
			return apierrors.IsInvalid(err), fmt.Sprint(err)
		})
	}
	t.Cleanup(restore)
	eventually(t, "the API server serves the CRD without the rule", func(ctx context.Context) (bool, string) {
		err := k8s.Create(ctx, te.DeepCopy(), client.DryRunAll)
		return err == nil, fmt.Sprint(err)
	})
	must(t, k8s.Create(ctx, te))
	restore()
}

func TestPodStatus(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, k8s.Create(ctx, deployment(ns, "agent", 2, true)))
	must(t, k8s.Create(ctx, tokenExchange(ns, "tx", "agent")))
	waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)

	sidecars := []string{contract.ComponentSpiffeHelper, contract.ComponentClientRegistration, contract.ComponentAuthProxy, contract.ComponentEnvoyProxy}
	var pods []*corev1.Pod
	for i := range 2 {
		p := injectedPod(ns, fmt.Sprintf("agent-%d", i), "agent", sidecars)
		must(t, k8s.Create(ctx, p))
		setPodStatus(t, p, sidecars, nil)
		pods = append(pods, p)
	}
	// A pod of the workload without the injected volume (e.g. from before injection) does not count.
	old := injectedPod(ns, "agent-old", "agent", nil)
	old.Spec.Volumes = nil
	must(t, k8s.Create(ctx, old))
	setPodStatus(t, old, nil, nil)

	// These pods have no IP (no role answers /status): they mount the ConfigMap (pods) but are
	// not known to run it (configuredPods, propagation_test.go).
	eventually(t, "2 pods, all sidecars ready", func(ctx context.Context) (bool, string) {
		te := getTX(ctx, t, ns, "tx")
		id := te.Status.IdentityStatus
		return te.Status.Pods == 2 && id != nil && *id == v1alpha1.IdentityStatus{SpiffeEnabled: true, IdpRegistered: true, InboundProxyReady: true, OutboundProxyReady: true},
			fmt.Sprintf("%d pods, %+v", te.Status.Pods, id)
	})

	// envoy-proxy stops being ready in one pod.
	setPodStatus(t, pods[1], sidecars, map[string]bool{contract.ComponentEnvoyProxy: true})
	eventually(t, "outbound proxy not ready", func(ctx context.Context) (bool, string) {
		te := getTX(ctx, t, ns, "tx")
		id := te.Status.IdentityStatus
		return id != nil && !id.OutboundProxyReady && id.InboundProxyReady, fmt.Sprintf("%+v", id)
	})

	must(t, k8s.Delete(ctx, pods[0], client.GracePeriodSeconds(0)))
	eventually(t, "1 pod", func(ctx context.Context) (bool, string) {
		te := getTX(ctx, t, ns, "tx")
		return te.Status.Pods == 1, fmt.Sprintf("%d", te.Status.Pods)
	})
}

func injectedPod(ns, name, app string, sidecars []string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "agent", Image: "example.com/agent:v1"}},
			Volumes: []corev1.Volume{{Name: contract.VolumeTokenExchange, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: app + "-token-exchange"}, Optional: ptr.To(true)}}}},
		},
	}
	for _, s := range sidecars { // native sidecars, the injector's default
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: s, Image: "example.com/" + s + ":v1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)})
	}
	return p
}

// combinedPod is injectedPod as the injector renders the combined sidecar: spiffe-helper and one
// authbridge container running roles (native sidecars).
func combinedPod(ns, name, app string, roles ...string) *corev1.Pod {
	p := injectedPod(ns, name, app, []string{contract.ComponentSpiffeHelper})
	p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: contract.ContainerAuthbridge, Image: "example.com/authbridge:v1",
		Args: append([]string{contract.AuthbridgeSidecarCommand}, roles...), RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)})
	return p
}

// leanPod is combinedPod as injection v4 renders it: the ConfigMap projected into the identity
// volume beside the downward-API files, no token-exchange volume.
func leanPod(ns, name, app string, roles ...string) *corev1.Pod {
	p := combinedPod(ns, name, app, roles...)
	p.Spec.Volumes = []corev1.Volume{{Name: contract.VolumeIdentity, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
			{Path: contract.IdentityPodNamespaceFile, FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-token-exchange"}, Optional: ptr.To(true)}},
	}}}}}
	return p
}

// TestV4PodsAreCounted: a pod of injection v4, whose ConfigMap is projected into the identity
// volume, is counted and probed like a pod of v1 to v3, whose ConfigMap is a volume of its own;
// during the rollout that upgrades a workload, both kinds run side by side.
func TestV4PodsAreCounted(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, k8s.Create(ctx, deployment(ns, "agent", 2, true)))
	must(t, k8s.Create(ctx, tokenExchange(ns, "tx", "agent")))
	waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)

	sidecars := []string{contract.ComponentSpiffeHelper, contract.ContainerAuthbridge}
	v3 := combinedPod(ns, "agent-v3", "agent", "register", "inbound", "outbound")
	v4 := leanPod(ns, "agent-v4", "agent", "register", "inbound", "outbound")
	for _, p := range []*corev1.Pod{v3, v4} {
		must(t, k8s.Create(ctx, p))
		setPodStatus(t, p, sidecars, nil)
	}
	eventually(t, "both pods counted", func(ctx context.Context) (bool, string) {
		te := getTX(ctx, t, ns, "tx")
		id := te.Status.IdentityStatus
		return te.Status.Pods == 2 && id != nil && *id == v1alpha1.IdentityStatus{SpiffeEnabled: true, IdpRegistered: true, InboundProxyReady: true, OutboundProxyReady: true},
			fmt.Sprintf("%d pods, %+v", te.Status.Pods, id)
	})

	// The v4 pod's authbridge stops being ready: it is what the status reports now.
	must(t, k8s.Delete(ctx, v3, client.GracePeriodSeconds(0)))
	setPodStatus(t, v4, sidecars, map[string]bool{contract.ContainerAuthbridge: true})
	eventually(t, "the v4 pod alone, its authbridge not ready", func(ctx context.Context) (bool, string) {
		te := getTX(ctx, t, ns, "tx")
		id := te.Status.IdentityStatus
		return te.Status.Pods == 1 && id != nil && *id == v1alpha1.IdentityStatus{SpiffeEnabled: true}, fmt.Sprintf("%d pods, %+v", te.Status.Pods, id)
	})
}

func setPodStatus(t testing.TB, p *corev1.Pod, sidecars []string, notReady map[string]bool) {
	t.Helper()
	ctx := context.Background()
	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(p), p))
	p.Status.Phase = corev1.PodRunning
	p.Status.InitContainerStatuses = nil
	for _, s := range sidecars {
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: s, Ready: !notReady[s], Image: "example.com/" + s + ":v1", ImageID: "x"})
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", Ready: true, Image: "example.com/agent:v1", ImageID: "x"}}
	must(t, k8s.Status().Update(ctx, p))
}

func TestCombinedSidecarContainerReportsItsComponents(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, true)))
	must(t, k8s.Create(ctx, tokenExchange(ns, "tx", "agent")))
	waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)

	sidecars := []string{contract.ComponentSpiffeHelper, contract.ContainerAuthbridge}
	p := combinedPod(ns, "agent-0", "agent", "register", "inbound", "outbound")
	must(t, k8s.Create(ctx, p))
	setPodStatus(t, p, sidecars, nil)
	eventually(t, "every component of the authbridge container ready", func(ctx context.Context) (bool, string) {
		id := getTX(ctx, t, ns, "tx").Status.IdentityStatus
		return id != nil && *id == v1alpha1.IdentityStatus{SpiffeEnabled: true, IdpRegistered: true, InboundProxyReady: true, OutboundProxyReady: true},
			fmt.Sprintf("%+v", id)
	})

	// The container not ready: all its components are not; spiffe-helper still is.
	setPodStatus(t, p, sidecars, map[string]bool{contract.ContainerAuthbridge: true})
	eventually(t, "the authbridge container's components not ready", func(ctx context.Context) (bool, string) {
		id := getTX(ctx, t, ns, "tx").Status.IdentityStatus
		return id != nil && *id == v1alpha1.IdentityStatus{SpiffeEnabled: true}, fmt.Sprintf("%+v", id)
	})

	// A workload that excludes client-registration: the container runs inbound and outbound only.
	q := combinedPod(ns, "agent-1", "agent", "inbound", "outbound")
	must(t, k8s.Create(ctx, q))
	setPodStatus(t, q, sidecars, nil)
	must(t, k8s.Delete(ctx, p, client.GracePeriodSeconds(0)))
	eventually(t, "registration not reported by a container that does not run it", func(ctx context.Context) (bool, string) {
		te := getTX(ctx, t, ns, "tx")
		id := te.Status.IdentityStatus
		return te.Status.Pods == 1 && id != nil && *id == v1alpha1.IdentityStatus{SpiffeEnabled: true, InboundProxyReady: true, OutboundProxyReady: true},
			fmt.Sprintf("%d pods, %+v", te.Status.Pods, id)
	})
}

func TestOtherWorkloadKinds(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	d := deployment(ns, "agent", 1, true)
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db-agent", Namespace: ns},
		Spec:       appsv1.StatefulSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template},
	}
	must(t, k8s.Create(ctx, ss))
	te := &v1alpha1.TokenExchange{ObjectMeta: metav1.ObjectMeta{Name: "tx", Namespace: ns},
		Spec: v1alpha1.TokenExchangeSpec{TargetRef: duck.TargetRef{Kind: "StatefulSet", Name: "db-agent"}}}
	must(t, k8s.Create(ctx, te))
	waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)
	cm, err := getCM(ctx, ns, "db-agent-token-exchange")
	require.NoError(t, err)
	assert.Equal(t, "StatefulSet/db-agent", cm.Annotations[resources.TargetAnno])
}

// updateRetrying applies mutate to the latest version of obj and updates it, retrying on conflicts:
// the controller writes the same objects (status, reverted edits) while a test changes them.
func updateRetrying(ctx context.Context, obj client.Object, mutate func()) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return k8s.Update(ctx, obj)
	})
}

// TestConfigMapEventsOnlyForNews: writing the ConfigMap the first time records no Event (the status
// says it is there); an update does, and so does re-creating one that someone deleted.
func TestConfigMapEventsOnlyForNews(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, true)))
	must(t, k8s.Create(ctx, tokenExchange(ns, "tx", "agent")))
	te := waitCondition(t, ns, "tx", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)

	must(t, updateRetrying(ctx, te, func() {
		te.Spec.Outbound = &v1alpha1.OutboundSpec{TokenExchange: &v1alpha1.OutboundTokenExchangeSpec{
			DefaultTarget: &v1alpha1.ExchangeTarget{Audience: "api"}}}
	}))
	waitEvent(t, ns, "tx", "ConfigMapUpdated")
	// The recorder sends Events in the order they were recorded: a creation Event would be here by now.
	assert.NotContains(t, eventReasons(ctx, t, ns, "tx"), "ConfigMapCreated", "the first write is no Event")

	cm, err := getCM(ctx, ns, "agent-token-exchange")
	require.NoError(t, err)
	must(t, k8s.Delete(ctx, cm))
	waitEvent(t, ns, "tx", "ConfigMapCreated")
	_, err = getCM(ctx, ns, "agent-token-exchange")
	require.NoError(t, err, "re-created")
}

// eventReasons lists the reasons of the Events regarding the named object.
func eventReasons(ctx context.Context, t *testing.T, ns, name string) []string {
	t.Helper()
	var list eventsv1.EventList
	must(t, k8s.List(ctx, &list, client.InNamespace(ns)))
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

func waitEvent(t *testing.T, ns, name, reason string) {
	t.Helper()
	eventually(t, "Event "+reason, func(ctx context.Context) (bool, string) {
		reasons := eventReasons(ctx, t, ns, name)
		return slices.Contains(reasons, reason), strings.Join(reasons, ", ")
	})
}

// TestStatusSaysWhetherTheChainIsVerified: status.delegation reflects
// spec.outbound.tokenExchange.delegation (chained: every hop is in the signed token), so that
// kubectl shows what a callee of the workload can rely on.
func TestStatusSaysWhetherTheChainIsVerified(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	te := tokenExchange(ns, "tx", "agent")
	te.Spec.Outbound = &v1alpha1.OutboundSpec{TokenExchange: &v1alpha1.OutboundTokenExchangeSpec{Delegation: "chained"}}
	must(t, k8s.Create(ctx, te))
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, false)))
	eventually(t, "status.delegation chained", func(ctx context.Context) (bool, string) {
		got := getTX(ctx, t, ns, "tx").Status.Delegation
		return got == "chained", "status.delegation = " + got
	})
}

// TestStatusSaysTheMTLSMode: status.mtls is spec.mtls.mode, off when unset, so that kubectl shows
// which workloads require mutual TLS.
func TestStatusSaysTheMTLSMode(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	plain := tokenExchange(ns, "plain", "agent")
	must(t, k8s.Create(ctx, plain))
	strict := tokenExchange(ns, "strict", "other")
	strict.Spec.MTLS = &v1alpha1.MTLSSpec{Mode: v1alpha1.MTLSStrict}
	must(t, k8s.Create(ctx, strict))
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, false)))
	must(t, k8s.Create(ctx, deployment(ns, "other", 1, false)))
	for name, want := range map[string]string{"plain": "off", "strict": "strict"} {
		eventually(t, "status.mtls "+want, func(ctx context.Context) (bool, string) {
			got := getTX(ctx, t, ns, name).Status.MTLS
			return got == want, "status.mtls = " + got
		})
	}
}
