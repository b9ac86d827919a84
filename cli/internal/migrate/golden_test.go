package migrate

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/cli/internal/manifest"
)

// Golden files: testdata/in/<case>.yaml is migrated; testdata/out/<case>.yaml holds the objects as
// `kagenti migrate` prints them, testdata/out/<case>.report.txt the not-migrated report.
// UPDATE_GOLDEN=1 rewrites them; a golden file without an input fails the test.

var updateGolden = os.Getenv("UPDATE_GOLDEN") == "1"

func goldenCases(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/in/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	return names
}

// migrateCase reads testdata/in/<name>.yaml the way the command does and migrates it.
func migrateCase(t *testing.T, name string) *Result {
	t.Helper()
	path := filepath.Join("testdata", "in", name+".yaml")
	docs, err := manifest.Read([]string{path}, false, nil)
	require.NoError(t, err)
	res, err := Migrate(FromDocuments(docs), Options{})
	require.NoError(t, err)
	return res
}

func TestGolden(t *testing.T) {
	expected := map[string]bool{}
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			res := migrateCase(t, name)
			var objs, report bytes.Buffer
			require.NoError(t, WriteYAML(&objs, res.Objects))
			require.NoError(t, WriteReport(&report, res.Findings))
			for file, got := range map[string][]byte{name + ".yaml": objs.Bytes(), name + ".report.txt": report.Bytes()} {
				expected[file] = true
				compareGolden(t, filepath.Join("testdata", "out", file), got)
			}
		})
	}
	stale, err := filepath.Glob("testdata/out/*")
	require.NoError(t, err)
	for _, f := range stale {
		if !expected[filepath.Base(f)] {
			t.Errorf("golden file %s has no input in testdata/in: delete it", f)
		}
	}
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if updateGolden {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run with UPDATE_GOLDEN=1")
	require.Equal(t, string(want), string(got), "%s is stale; run with UPDATE_GOLDEN=1 and review the diff", path)
}

// TestEveryLeafAccounted: for every input, every leaf of every legacy object has a disposition, and
// every verbatim copy is in the output, value for value (checked here independently of the ledger's
// own verification).
func TestEveryLeafAccounted(t *testing.T) {
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			res := migrateCase(t, name)
			require.NotEmpty(t, res.Ledgers)
			out := map[string]map[string]any{}
			for _, o := range res.Objects {
				out[o.GetNamespace()+"/"+o.Ref()] = o.Object
			}
			for _, l := range res.Ledgers {
				require.Empty(t, l.Unaccounted(), "%s", l.source)
				for _, c := range l.Carried() {
					dst, ok := out[l.source.Namespace+"/"+c.Object]
					require.True(t, ok, "%s: copied to %s, which is not written", l.source, c.Object)
					for _, lf := range l.leaves {
						if !lf.path.HasPrefix(c.From) {
							continue
						}
						if d := l.marks[lf.path.key()]; !d.migrated {
							continue // reported as lost on the way: the report says so
						}
						got, found := Lookup(dst, c.To.Child(lf.path[len(c.From):]...))
						if !found {
							require.True(t, isEmpty(lf.value), "%s: %s not in %s", l.source, lf.path, c.Object)
							continue
						}
						if !sameValue(got, lf.value) {
							require.Contains(t, l.marks[lf.path.key()].to, "canonical form", "%s: %s", l.source, lf.path)
						}
					}
				}
			}
		})
	}
}

// TestUnknownFieldsAreReported: a field migrate does not know is reported, never dropped.
func TestUnknownFieldsAreReported(t *testing.T) {
	docs, err := manifest.Read([]string{"testdata/in/seed-agent.yaml"}, false, nil)
	require.NoError(t, err)
	obj := docs[0].Object.Object
	obj["spec"].(map[string]any)["futureField"] = map[string]any{"a": "b", "c": []any{int64(1), int64(2)}}
	containers := obj["spec"].(map[string]any)["podTemplateSpec"].(map[string]any)["containers"].([]any)
	containers[0].(map[string]any)["notAContainerField"] = "x"
	res, err := Migrate(FromDocuments(docs), Options{})
	require.NoError(t, err)
	var paths []string
	for _, f := range res.Findings {
		paths = append(paths, f.Path+": "+f.Reason)
	}
	sort.Strings(paths)
	require.Contains(t, strings.Join(paths, "\n"), `spec.futureField.a: not a field of Agent that migrate knows`)
	require.Contains(t, strings.Join(paths, "\n"), `spec.futureField.c[1]: not a field of Agent that migrate knows`)
	require.Contains(t, strings.Join(paths, "\n"), `spec.podTemplateSpec.containers[0].notAContainerField: Deployment/weather-agent has no field spec.template.spec.containers[0].notAContainerField`)
}

func TestUnknownKindNamesFileAndDocument(t *testing.T) {
	docs, err := manifest.Read([]string{"testdata/unknown-kind.yaml"}, false, nil)
	require.NoError(t, err)
	_, err = Migrate(FromDocuments(docs), Options{})
	require.EqualError(t, err, "testdata/unknown-kind.yaml, document 2: v1 ConfigMap is not a legacy Kagenti object migrate converts (it converts agent.kagenti.dev/v1alpha1 Agent, agent.kagenti.dev/v1alpha1 AgentRuntime, agent.kagenti.dev/v1alpha1 AgentCard, agent.kagenti.dev/v1alpha1 AgentBuild, kagenti.io/v1alpha1 Agent, and passes through the workloads an AgentRuntime targets)")
}

// TestLastAppliedHasItsOwnReason: kubectl's last-applied annotation is reported as such, also on an
// AgentRuntime, whose other annotations follow the pillar CRs made from it.
func TestLastAppliedHasItsOwnReason(t *testing.T) {
	docs, err := manifest.Read([]string{"testdata/in/agentruntime-only.yaml"}, false, nil)
	require.NoError(t, err)
	docs[0].Object.SetAnnotations(map[string]string{lastApplied: "{}", "team": "b"})
	res, err := Migrate(FromDocuments(docs), Options{})
	require.NoError(t, err)
	var got []string
	for _, f := range res.Findings {
		got = append(got, f.Path+": "+f.Reason)
	}
	require.Contains(t, got, `metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]: `+reasonLastApplied)
	require.NotContains(t, strings.Join(got, "\n"), `metadata.annotations.team`, "carried to the AgentTrace made from the AgentRuntime")
}
