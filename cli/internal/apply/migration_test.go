package apply

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/cli/internal/migrate"
)

// legacyAgent stores an agent.kagenti.dev Agent as the kagenti-operator left it: with its finalizer.
func legacyAgent(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agent.kagenti.dev/v1alpha1", "kind": "Agent",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"team": "a"},
			"finalizers": []any{UpstreamFinalizer}},
		"spec": map[string]any{
			"replicas":        int64(2),
			"imageSource":     map[string]any{"image": "ghcr.io/example/research:v1"},
			"servicePorts":    []any{map[string]any{"name": "http", "port": int64(8000), "protocol": "TCP"}},
			"podTemplateSpec": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "agent"}}}},
		},
	}}
	ri, _, err := clients.Resource(migrate.UpstreamAgent, ns)
	require.NoError(t, err)
	created, err := ri.Create(context.Background(), u, metav1.CreateOptions{})
	require.NoError(t, err)
	return created
}

// operatorDeployment is the Deployment the kagenti-operator's createDeploymentForAgent made for that
// Agent, written out here from the operator's code (independently of migrate's rendering).
func operatorDeployment(agent *unstructured.Unstructured, runAsUser *int64) *appsv1.Deployment {
	name := agent.GetName()
	labels := map[string]string{"app.kubernetes.io/name": name, "team": "a"}
	owner := metav1.OwnerReference{APIVersion: agent.GetAPIVersion(), Kind: agent.GetKind(), Name: name, UID: agent.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: agent.GetNamespace(), Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: name,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: runAsUser, FSGroup: runAsUser,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: "agent", Image: "ghcr.io/example/research:v1",
						Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 8000, Protocol: corev1.ProtocolTCP}},
						VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/app/.cache"}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Privileged: ptr.To(false),
							ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
					Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
}

func migrateFromCluster(t *testing.T, ns string, deleteOld bool) string {
	t.Helper()
	ctx := context.Background()
	inputs, live, err := ReadLegacy(ctx, clients, ns)
	require.NoError(t, err)
	res, err := migrate.Migrate(inputs, migrate.Options{Live: live})
	require.NoError(t, err)
	var out bytes.Buffer
	a := &Applier{Clients: clients, FieldManager: "kagenti-migrate"}
	require.NoError(t, a.ApplyMigration(ctx, res, MigrationOptions{DeleteOld: deleteOld, Out: &out}))
	return out.String()
}

// TestMigrationAdoptsWithoutRollout: an Agent's Deployment, Service and ServiceAccount, made by the
// kagenti-operator, are taken over: their owner references to the Agent go, so deleting the Agent
// (past the operator's finalizer, which would delete them) leaves them; the Deployment gets the
// injection labels, and its pod template does not change, so no pod restarts.
func TestMigrationAdoptsWithoutRollout(t *testing.T) {
	ctx := context.Background()
	ns := scratchNamespace(t, "adopt")
	agent := legacyAgent(t, ns, "research")
	dep, err := clients.Kube.AppsV1().Deployments(ns).Create(ctx, operatorDeployment(agent, ptr.To[int64](1000)), metav1.CreateOptions{FieldManager: "manager"})
	require.NoError(t, err)
	owner := dep.OwnerReferences
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "research", Namespace: ns, OwnerReferences: owner, Labels: map[string]string{"app.kubernetes.io/name": "research"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app.kubernetes.io/name": "research"}, Ports: []corev1.ServicePort{{Name: "http", Port: 8000, Protocol: corev1.ProtocolTCP}}}}
	_, err = clients.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{FieldManager: "manager"})
	require.NoError(t, err)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "research", Namespace: ns, OwnerReferences: owner}}
	_, err = clients.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{FieldManager: "manager"})
	require.NoError(t, err)

	out := migrateFromCluster(t, ns, true)
	t.Log(out)

	after, err := clients.Kube.AppsV1().Deployments(ns).Get(ctx, "research", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, dep.Generation, after.Generation, "the Deployment's spec changed: its pods would roll")
	require.Equal(t, dep.Spec.Template, after.Spec.Template)
	require.Empty(t, after.OwnerReferences)
	require.Equal(t, "enabled", after.Labels["kagenti.io/inject"])
	require.Equal(t, "agent", after.Labels["kagenti.io/type"])
	gotSvc, err := clients.Kube.CoreV1().Services(ns).Get(ctx, "research", metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, gotSvc.OwnerReferences)
	gotSA, err := clients.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, "research", metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, gotSA.OwnerReferences)

	require.Contains(t, out, ns+"/deployment.apps/research configured; adopted from Agent "+ns+"/research (owner reference removed); pod template unchanged: its pods keep running")
	require.Contains(t, out, "agent.agent.kagenti.dev/research deleted (finalizer agent.kagenti.dev/finalizer removed first")

	// envtest runs no garbage collector: the Agent waits for it with the orphan finalizer, which is
	// exactly what keeps the migrated objects.
	ri, _, err := clients.Resource(migrate.UpstreamAgent, ns)
	require.NoError(t, err)
	old, err := ri.Get(ctx, "research", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		require.NoError(t, err)
		require.NotNil(t, old.GetDeletionTimestamp())
		require.Equal(t, []string{metav1.FinalizerOrphanDependents}, old.GetFinalizers())
	}
}

// TestMigrationSaysWhenPodsRoll: when the operator's Deployment differs from what migrate renders (an
// operator on OpenShift set no runAsUser), the apply says that its pods roll.
func TestMigrationSaysWhenPodsRoll(t *testing.T) {
	ctx := context.Background()
	ns := scratchNamespace(t, "roll")
	agent := legacyAgent(t, ns, "research")
	_, err := clients.Kube.AppsV1().Deployments(ns).Create(ctx, operatorDeployment(agent, nil), metav1.CreateOptions{FieldManager: "manager"})
	require.NoError(t, err)
	out := migrateFromCluster(t, ns, false)
	require.Contains(t, out, ns+"/deployment.apps/research configured; adopted from Agent "+ns+"/research (owner reference removed); the pod template changes: its pods roll once")
	require.Contains(t, out, "agent.agent.kagenti.dev/research left in place")
}

// TestMigrationAppliesNothingWhenTheDryRunRefusesOne: one invalid object, nothing written.
func TestMigrationAppliesNothingWhenTheDryRunRefusesOne(t *testing.T) {
	ctx := context.Background()
	ns := scratchNamespace(t, "refused")
	svc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "ok", "namespace": ns},
		"spec":     map[string]any{"ports": []any{map[string]any{"port": int64(80)}}}}}
	bad := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kagenti.io/v1alpha1", "kind": "TokenExchange",
		"metadata": map[string]any{"name": "bad", "namespace": ns},
		"spec": map[string]any{"targetRef": map[string]any{"kind": "Deployment", "name": "x"},
			"inbound": map[string]any{"port": int64(8080), "targetPort": int64(8080)}}}}
	res := &migrate.Result{Objects: []*migrate.Object{{Unstructured: svc}, {Unstructured: bad}}}
	a := &Applier{Clients: clients, FieldManager: "kagenti-migrate"}
	var out bytes.Buffer
	err := a.ApplyMigration(ctx, res, MigrationOptions{Out: &out})
	require.ErrorContains(t, err, "the server dry run refused 1 of 2 objects; nothing was applied")
	require.ErrorContains(t, err, ns+"/tokenexchange.kagenti.io/bad: TokenExchange.kagenti.io \"bad\" is invalid: spec.inbound.targetPort")
	_, err = clients.Kube.CoreV1().Services(ns).Get(ctx, "ok", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the valid Service was applied although the dry run refused another object: %v", err)
}
