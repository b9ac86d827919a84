package cmd

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func run(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := NewRoot("kagenti", genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	// No cluster is reachable from these tests: a kubeconfig that does not exist makes sure none is used.
	root.SetArgs(append([]string{"--kubeconfig", filepath.Join(t.TempDir(), "none")}, args...))
	err = root.Execute()
	return out.String(), errOut.String(), err
}

func TestName(t *testing.T) {
	require.Equal(t, "kagenti", Name("/usr/local/bin/kagenti"))
	require.Equal(t, "kubectl kagenti", Name("/usr/local/bin/kubectl-kagenti"))
}

func TestMigrateFlags(t *testing.T) {
	for args, want := range map[string]string{
		"":                                   "give the legacy objects with -f",
		"-f x.yaml --from-cluster":           "-f and --from-cluster exclude each other",
		"-f x.yaml -A":                       "-A applies to --from-cluster",
		"-f x.yaml --delete-old":             "--delete-old applies to --apply",
		"-f x.yaml --dry-run=server":         "--dry-run=server applies to --apply",
		"-f x.yaml --apply --dry-run=client": `--dry-run=client: must be "none" or "server"`,
		"-f x.yaml --apply --dry-run=server --delete-old": "--delete-old deletes nothing with --dry-run=server",
	} {
		_, _, err := run(t, "", append([]string{"migrate"}, strings.Fields(args)...)...)
		require.ErrorContains(t, err, want, "migrate %s", args)
	}
}

const seed = `apiVersion: kagenti.io/v1alpha1
kind: Agent
metadata:
  name: weather-agent
spec:
  imageSource:
    image: ghcr.io/example/weather-agent:v1
  podTemplateSpec:
    containers:
    - name: agent
  servicePorts:
  - name: http
    port: 8081
  futureField: x
`

func TestMigrateFromStdinToDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out") + "/"
	stdout, stderr, err := run(t, seed, "migrate", "-f", "-", "-n", "agents", "-o", dir)
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	require.Equal(t, []string{"agents.deployment.weather-agent.yaml", "agents.service.weather-agent.yaml"}, names)
	require.Contains(t, stdout, "agents.deployment.weather-agent.yaml")
	// The unknown field is reported on stderr, not dropped.
	require.Contains(t, stderr, "spec.futureField: not a field of Agent that migrate knows")
}

func TestMigrateStrictFailsOnFindings(t *testing.T) {
	_, _, err := run(t, seed, "migrate", "-f", "-", "--strict")
	var exit *ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 1, exit.Code)
	require.Contains(t, exit.Message, "--strict: 1 finding(s) not migrated")
}

func TestDescribeArgs(t *testing.T) {
	_, _, err := run(t, "", "describe", "weather-agent")
	require.ErrorContains(t, err, `give TYPE/NAME or TYPE NAME`)
	_, _, err = run(t, "", "describe", "deployment/x", "-o", "wide")
	require.ErrorContains(t, err, "-o wide: json or yaml")
}

func TestCheckFlags(t *testing.T) {
	_, _, err := run(t, "", "check", "--pillars", "injector,tokenexchang")
	require.ErrorContains(t, err, `unknown pillar "tokenexchang"`)
	_, _, err = run(t, "", "check", "--identity", "maybe")
	require.ErrorContains(t, err, "--identity=maybe: auto, true or false")
}

func TestCompletion(t *testing.T) {
	stdout, _, err := run(t, "", "completion", "bash")
	require.NoError(t, err)
	require.Contains(t, stdout, "__start_kagenti")
}
