package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// installShippedRBAC creates the ServiceAccount, Roles, ClusterRoles and bindings of the pillar's
// kustomize base (rendered by kubectl kustomize, as installed) so that a test can run the webhook
// with exactly the rights it ships with.
func installShippedRBAC(t *testing.T, c client.Client, kubectl string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", filepath.Join(repoRoot(), "deploy", "kustomize", "injector"))
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "kubectl kustomize: %s", errOut.String())
	kinds := map[string]bool{"ServiceAccount": true, "Role": true, "ClusterRole": true, "RoleBinding": true, "ClusterRoleBinding": true}
	dec := yaml.NewYAMLOrJSONDecoder(&out, 4096)
	n := 0
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if kinds[u.GetKind()] {
			require.NoError(t, c.Create(context.Background(), u), "%s %s", u.GetKind(), u.GetName())
			n++
		}
	}
	require.NotZero(t, n, "the injector base ships no RBAC")
}

// asServiceAccount is cfg impersonating ServiceAccount ns/name: the API server authorizes every
// request with that account's rights (and its groups) only.
func asServiceAccount(cfg *rest.Config, ns, name string) *rest.Config {
	sa := rest.CopyConfig(cfg)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name}
	return sa
}
