package apply

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	buildv1 "github.com/kagenti/platform/agentbuild/api/v1alpha1"
	cardv1 "github.com/kagenti/platform/agentcard/api/v1alpha1"
	tracev1 "github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/cli/internal/manifest"
	"github.com/kagenti/platform/cli/internal/migrate"
	txv1 "github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// The migrate goldens (internal/migrate/testdata/out) are what users get. Every object in them must
// be accepted by a real API server with the pillars' CRDs (server-side dry run, the same apply path
// as `kagenti migrate --apply`), and decode strictly into its API type: no field that the type does
// not have.

func goldenDir() string { return filepath.Join("..", "migrate", "testdata") }

// strictTypes are the API types the goldens' kinds decode into.
var strictTypes = map[schema.GroupVersionKind]func() any{
	{Group: "apps", Version: "v1", Kind: "Deployment"}:                       func() any { return &appsv1.Deployment{} },
	{Version: "v1", Kind: "Service"}:                                         func() any { return &corev1.Service{} },
	{Version: "v1", Kind: "ServiceAccount"}:                                  func() any { return &corev1.ServiceAccount{} },
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}:        func() any { return &rbacv1.Role{} },
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"}: func() any { return &rbacv1.RoleBinding{} },
	txv1.GroupVersion.WithKind("TokenExchange"):                              func() any { return &txv1.TokenExchange{} },
	tracev1.GroupVersion.WithKind("AgentTrace"):                              func() any { return &tracev1.AgentTrace{} },
	cardv1.GroupVersion.WithKind("AgentCard"):                                func() any { return &cardv1.AgentCard{} },
	buildv1.GroupVersion.WithKind("AgentBuild"):                              func() any { return &buildv1.AgentBuild{} },
}

func TestGoldenOutputsAreValid(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join(goldenDir(), "in", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, inputs)
	a := &Applier{Clients: clients, FieldManager: "kagenti-migrate-test"}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			docs, err := manifest.Read([]string{in}, false, nil)
			require.NoError(t, err)
			res, err := migrate.Migrate(migrate.FromDocuments(docs), migrate.Options{})
			require.NoError(t, err)
			golden, err := manifest.Read([]string{filepath.Join(goldenDir(), "out", name+".yaml")}, false, nil)
			require.NoError(t, err)
			require.Len(t, golden, len(res.Objects), "the golden is stale: run the migrate tests with UPDATE_GOLDEN=1")

			ctx := context.Background()
			for i, doc := range golden {
				obj := doc.Object
				if obj.GetNamespace() == "" {
					obj.SetNamespace("default") // where kubectl would put it
				}
				ensureNamespace(t, obj.GetNamespace())
				if res.Objects[i].Patch {
					createTarget(t, obj.GetNamespace(), obj.GetName())
				}

				raw, err := json.Marshal(obj.Object)
				require.NoError(t, err)
				newType, ok := strictTypes[obj.GroupVersionKind()]
				require.True(t, ok, "%s: no API type for %s", doc.Where(), obj.GroupVersionKind())
				require.NoError(t, yaml.UnmarshalStrict(raw, newType()), "%s: %s does not decode strictly into its API type", doc.Where(), obj.GetKind())

				_, err = a.Apply(ctx, obj, true)
				require.NoError(t, err, "%s: the API server refused %s %s", doc.Where(), obj.GetKind(), obj.GetName())
			}
		})
	}
}

// createTarget creates the existing workload an apply configuration (Object.Patch) is meant for.
func createTarget(t *testing.T, ns, name string) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/example/agent:v1"}}},
			},
		},
	}
	_, err := clients.Kube.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("creating target %s/%s: %v", ns, name, err)
	}
}
