package uninstall

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kagenti/platform/cli/internal/kube"
)

// TestUninstallRemovesAdmissionPolicies: the ValidatingAdmissionPolicies netpol and agentcard ship
// (and their bindings) are part of the installation; left behind, they would go on refusing label
// values once Kagenti is gone. A policy that is not Kagenti's stays.
func TestUninstallRemovesAdmissionPolicies(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: this test needs kube-apiserver and etcd; run `make tools` and set KUBEBUILDER_ASSETS to its bin/ (the Makefile does)")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	c, err := kube.NewForConfig(cfg, nil)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kagenti-system"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	vap := c.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	bindings := c.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	for _, name := range []string{"kagenti-agentcard-workload-labels", "someone-elses"} {
		labels := map[string]string{LabelPartOf: PartOfKagenti}
		if name == "someone-elses" {
			labels = nil
		}
		_, err := vap.Create(ctx, &admissionv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: admissionv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: ptr.To(admissionv1.Fail),
				MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Create},
						Rule: admissionv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}}}},
				Validations: []admissionv1.Validation{{Expression: "true"}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = bindings.Create(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	var out bytes.Buffer
	require.NoError(t, Run(ctx, c, Options{Namespace: "kagenti-system", Timeout: time.Minute, Out: &out}))
	t.Log(out.String())
	_, err = vap.Get(ctx, "kagenti-agentcard-workload-labels", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "Kagenti's policy is deleted: %v", err)
	_, err = bindings.Get(ctx, "kagenti-agentcard-workload-labels", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "its binding is deleted: %v", err)
	_, err = vap.Get(ctx, "someone-elses", metav1.GetOptions{})
	assert.NoError(t, err, "a policy that is not Kagenti's stays")
	_, err = bindings.Get(ctx, "someone-elses", metav1.GetOptions{})
	assert.NoError(t, err)
}
