package check

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kagenti/platform/cli/internal/kube"
)

// agentBuildCRD is a CRD named as agentbuild's, serving version with shortNames (a stand-in for a
// stale or broken install).
func agentBuildCRD(version string, shortNames ...string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "agentbuilds.kagenti.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "kagenti.io", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "agentbuilds", Singular: "agentbuild", Kind: "AgentBuild", ListKind: "AgentBuildList", ShortNames: shortNames},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptrTrue()}}}},
		},
	}
}

func ptrTrue() *bool { b := true; return &b }

// createCRD creates crd and waits until the API server reports its condition cond with status.
func createCRD(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition, cond, status string) {
	t.Helper()
	ctx := context.Background()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(crdGVK)
	ri, _, err := admin.Resource(crdGVK, "")
	require.NoError(t, err)
	_, err = ri.Create(ctx, u, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := ri.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		c := kube.FindCondition(kube.Conditions(got), cond)
		return c != nil && c.Status == status
	}, time.Minute, 50*time.Millisecond, "CRD %s never %s=%s", crd.Name, cond, status)
}

// deleteCRD deletes the CRD name and waits until it is gone.
func deleteCRD(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	ri, _, err := admin.Resource(crdGVK, "")
	require.NoError(t, err)
	if err := ri.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		_, err := ri.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, time.Minute, 50*time.Millisecond, "CRD %s not deleted", name)
}

// Each line of the CRD check, on the CRD of agentbuild as it goes from missing to broken to
// installed.
func TestCheckCRDLines(t *testing.T) {
	opts := Options{Namespace: installNamespace(t), Pillars: []string{"agentbuild"}, ReadOnly: true}
	t.Cleanup(func() { deleteCRD(t, "agentbuilds.kagenti.io") })
	deleteCRD(t, "agentbuilds.kagenti.io")

	fix := requireLine(t, runCheck(t, clients(t), opts),
		"✗ CRD agentbuilds.kagenti.io: not installed: AgentBuild objects cannot be created and kagenti-agentbuild has nothing to watch")
	require.Contains(t, fix, "    fix: kubectl apply --server-side -k deploy/crds/agentbuild")

	createCRD(t, agentBuildCRD("v1beta1"), "Established", "True")
	requireLine(t, runCheck(t, clients(t), opts),
		"✗ CRD agentbuilds.kagenti.io: does not serve v1alpha1, the version this kagenti speaks (it serves v1beta1)")
	deleteCRD(t, "agentbuilds.kagenti.io")

	// A short name AgentCard's CRD has: the API server does not accept the names, so never
	// establishes the CRD.
	createCRD(t, agentBuildCRD("v1alpha1", "card"), "NamesAccepted", "False")
	requireLine(t, runCheck(t, clients(t), opts), "✗ CRD agentbuilds.kagenti.io: not established (")
	deleteCRD(t, "agentbuilds.kagenti.io")

	_, err := envtest.InstallCRDs(testCfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join(repo(), "deploy", "crds", "agentbuild")}, ErrorIfPathMissing: true})
	require.NoError(t, err)
	requireLine(t, runCheck(t, clients(t), opts), "✓ CRD agentbuilds.kagenti.io: established, serves v1alpha1 (storage v1alpha1)")
}

// A user who may not read CRDs is told so, and the pillars whose CRD could not be checked get no
// reconcile probe.
func TestCheckCRDUnreadable(t *testing.T) {
	ns := installNamespace(t)
	c := asUser(t, append(readAll("apps/deployments", "admissionregistration.k8s.io/mutatingwebhookconfigurations", "admissionregistration.k8s.io/validatingwebhookconfigurations"),
		allow("", "namespaces", "create", "delete"))...)
	results := runCheck(t, c, Options{Namespace: ns, Pillars: []string{"agenttrace", "netpol"}})
	fix := requireLine(t, results, "✗ CRD agenttraces.kagenti.io: cannot read it: ")
	require.Contains(t, fix, "    fix: check your access to customresourcedefinitions (kubectl auth can-i get crd)")
	requireLine(t, results, "✗ kagenti-agenttrace: no Deployment "+ns+"/kagenti-agenttrace, and no reconcile probe (its CRD is missing)")
	requireLine(t, results, "✗ kagenti-netpol: no Deployment "+ns+"/kagenti-netpol, and no reconcile probe (the AgentCard CRD is missing)")
}
