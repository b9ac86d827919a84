package resources

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/pkg/duck"
)

// UPDATE_GOLDEN=1 go test ./agenttrace/internal/resources/ rewrites testdata/*.golden.yaml.
var updateGolden = os.Getenv("UPDATE_GOLDEN") == "1"

// loadAgentTrace reads testdata/<name>.in.yaml.
func loadAgentTrace(t testing.TB, path string) *v1alpha1.AgentTrace {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var cr v1alpha1.AgentTrace
	require.NoError(t, yaml.UnmarshalStrict(b, &cr), path)
	return &cr
}

// workloadFor builds the workload cr targets: a minimal object of its kind with a pod template.
func workloadFor(t testing.TB, cr *v1alpha1.AgentTrace) *duck.Workload {
	t.Helper()
	gvk, err := cr.Spec.TargetRef.GroupVersionKind()
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(gvk)
	u.SetName(cr.Spec.TargetRef.Name)
	u.SetNamespace(cr.Namespace)
	template := map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "agent"}}}}
	path := []string{"spec", "template"}
	if gvk.Kind == "CronJob" {
		path = []string{"spec", "jobTemplate", "spec", "template"}
	}
	require.NoError(t, unstructured.SetNestedMap(u.Object, template, path...))
	w, err := duck.NewWorkload(u)
	require.NoError(t, err)
	return w
}

func TestMakeConfigMapGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.in.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, inputs)
	used := map[string]bool{}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		golden := filepath.Join("testdata", name+".golden.yaml")
		used[golden] = true
		t.Run(name, func(t *testing.T) {
			cr := loadAgentTrace(t, in)
			cm, err := MakeConfigMap(cr, workloadFor(t, cr))
			require.NoError(t, err)
			got, err := yaml.Marshal(cm)
			require.NoError(t, err)
			if updateGolden {
				require.NoError(t, os.WriteFile(golden, got, 0o644))
				return
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "missing golden file; run with UPDATE_GOLDEN=1")
			require.Equal(t, string(want), string(got), "%s is stale; rerun with UPDATE_GOLDEN=1 and review the diff", golden)

			again, err := MakeConfigMap(cr, workloadFor(t, cr))
			require.NoError(t, err)
			require.Equal(t, cm, again, "rendering must be deterministic")
		})
	}
	goldens, err := filepath.Glob("testdata/*.golden.yaml")
	require.NoError(t, err)
	for _, g := range goldens {
		if !used[g] {
			t.Errorf("stale golden %s has no input %s", g, strings.TrimSuffix(g, ".golden.yaml")+".in.yaml")
		}
	}
}

func v1alpha1TargetRef(kind, name string) duck.TargetRef {
	return duck.TargetRef{Kind: kind, Name: name}
}

// BenchmarkMakeConfigMap renders the seed example: go test -run '^$' -bench . ./agenttrace/internal/resources/
func BenchmarkMakeConfigMap(b *testing.B) {
	cr := loadAgentTrace(b, "testdata/seed.in.yaml")
	w := workloadFor(b, cr)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MakeConfigMap(cr, w); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLargestResourceAttributesFit: the largest resourceAttributes the CRD admits (8192 characters
// of names and values, here all 4-byte UTF-8 characters, which percent-encoding turns into 12
// bytes) still fit a ConfigMap (1 MiB) and keep the OTEL_RESOURCE_ATTRIBUTES line of otel.env
// below the kernel's 128 KiB limit for one environment string (MAX_ARG_STRLEN), so that
// `set -a; . otel.env; exec agent` works.
func TestLargestResourceAttributesFit(t *testing.T) {
	cr := loadAgentTrace(t, "testdata/minimal.in.yaml")
	cr.Spec.ResourceAttributes = map[string]v1alpha1.ResourceAttributeValue{}
	total := 0
	for i := 0; total < 8192-1024-8; i++ {
		key := fmt.Sprintf("attr.%02d", i)
		cr.Spec.ResourceAttributes[key] = v1alpha1.ResourceAttributeValue(strings.Repeat("😀", 1024))
		total += len(key) + 1024
	}
	cr.Spec.ResourceAttributes["rest"] = v1alpha1.ResourceAttributeValue(strings.Repeat("😀", 8192-total-len("rest")))
	total = 8192
	cm, err := MakeConfigMap(cr, workloadFor(t, cr))
	require.NoError(t, err)
	size := 0
	for k, v := range cm.Data {
		size += len(k) + len(v)
	}
	t.Logf("%d characters of resource attributes: ConfigMap data %d bytes", total, size)
	assert.Less(t, size, 1<<20)
	for _, line := range strings.Split(cm.Data[KeyOTelEnv], "\n") {
		assert.Less(t, len(line), 128<<10, "an otel.env line longer than MAX_ARG_STRLEN")
	}
}
