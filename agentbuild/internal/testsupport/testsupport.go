// Package testsupport gives tests the repository's real default templates, CRDs and Tekton's CRDs.
package testsupport

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// RepoRoot is the repository root (…/main), found from this file's path.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// TemplatesDir holds the default templates shipped in deploy/.
func TemplatesDir() string {
	return filepath.Join(RepoRoot(), "deploy", "kustomize", "agentbuild", "templates")
}

// CRDDir holds the generated AgentBuild CRD.
func CRDDir() string { return filepath.Join(RepoRoot(), "deploy", "crds", "agentbuild") }

// DefaultTemplates reads every ConfigMap of the shipped default templates into namespace.
func DefaultTemplates(t testing.TB, namespace string) []*corev1.ConfigMap {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(TemplatesDir(), "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates in %s: %v", TemplatesDir(), err)
	}
	var out []*corev1.ConfigMap
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{}
		if err := yaml.UnmarshalStrict(data, cm); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cm.Namespace = namespace
		out = append(out, cm)
	}
	return out
}

// TektonCRDDir copies Tekton's own CRDs for pipelines, pipelineruns, tasks and taskruns from the
// tektoncd/pipeline module this binary is built with into a temporary directory.
func TektonCRDDir(t testing.TB) string {
	t.Helper()
	dir := tektonModuleDir(t)
	out := t.TempDir()
	for _, name := range []string{"300-pipeline.yaml", "300-pipelinerun.yaml", "300-task.yaml", "300-taskrun.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, "config", "300-crds", name))
		if err != nil {
			t.Fatalf("reading Tekton CRD %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(out, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// tektonModuleDir finds github.com/tektoncd/pipeline in the module cache from the build info.
func tektonModuleDir(t testing.TB) string {
	const mod = "github.com/tektoncd/pipeline"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info: cannot locate the Tekton module")
	}
	version := ""
	for _, d := range bi.Deps {
		if d.Path == mod {
			version = d.Version
			if d.Replace != nil {
				version = d.Replace.Version
			}
		}
	}
	if version == "" {
		// Test binaries may carry no module list: ask the go command, from this module.
		for _, env := range [][]string{nil, {"GOWORK=off"}} {
			cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod)
			cmd.Dir = filepath.Join(RepoRoot(), "agentbuild")
			cmd.Env = append(os.Environ(), env...)
			if out, err := cmd.Output(); err == nil && strings.TrimSpace(string(out)) != "" {
				return strings.TrimSpace(string(out))
			}
		}
		t.Fatalf("cannot locate module %s (neither in the build info nor with go list -m)", mod)
	}
	gomodcache := os.Getenv("GOMODCACHE")
	if gomodcache == "" {
		gopath := os.Getenv("GOPATH")
		if gopath == "" {
			home, _ := os.UserHomeDir()
			gopath = filepath.Join(home, "go")
		}
		gomodcache = filepath.Join(strings.Split(gopath, string(os.PathListSeparator))[0], "pkg", "mod")
	}
	dir := filepath.Join(gomodcache, mod+"@"+version)
	if _, err := os.Stat(filepath.Join(dir, "config", "300-crds")); err != nil {
		t.Fatalf("Tekton CRDs not found at %s (set GOMODCACHE?): %v", dir, err)
	}
	return dir
}

// ControlPlaneStartTimeout is how long envtest waits for etcd and kube-apiserver to answer. Its
// default, 20 s, is shorter than kube-apiserver's start on two loaded cores: beside other test
// processes (load average 15-20) all five retries timed out and the package failed before a test
// ran. The Makefile's KUBEBUILDER_CONTROLPLANE_START_TIMEOUT=2m covers make test, not a plain go test.
const ControlPlaneStartTimeout = 2 * time.Minute

// Assets returns KUBEBUILDER_ASSETS or fails the test with a clear message.
func Assets(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("envtest needs %s in %s (KUBEBUILDER_ASSETS); build it with `make tools`: %v", b, dir, err)
		}
	}
	return dir
}
