package resources

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kagenti/platform/agentbuild/internal/tekton"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/agentbuild/api/v1alpha1"
	"github.com/kagenti/platform/agentbuild/internal/templates"
	"github.com/kagenti/platform/agentbuild/internal/testsupport"
)

// TestStepsKeepParametersOutOfShell: every step of the shipped templates hands parameters (which
// the AgentBuild's author sets, through spec or spec.pipeline.parameters) to its script through
// environment variables, never by Tekton's textual $(params.…) substitution into the script, and
// the user-controlled positional arguments of git, buildah, the buildpacks creator, trivy and
// cosign come after "--", so a value starting with "-" cannot become an option.
func TestStepsKeepParametersOutOfShell(t *testing.T) {
	for _, cm := range testsupport.DefaultTemplates(t, templateNS) {
		data, ok := cm.Data["task-spec.yaml"]
		if !ok {
			continue
		}
		ts, err := templates.ParseTaskSpec([]byte(data))
		require.NoError(t, err, cm.Name)
		for _, step := range ts.Steps {
			assert.NotContains(t, step.Script, "$(params.", "%s step %s: a parameter substituted into the script", cm.Name, step.Name)
		}
	}
	for _, want := range []struct{ step, pattern string }{
		{"step-git-clone", `git remote add -- origin "\$\{SOURCE_REPO_URL\}"`},
		{"step-git-clone", `git fetch -q --depth 1 -- origin "\$\{SOURCE_REVISION\}"`},
		{"step-buildah-build", `buildah push [^\n]* -- "\$\{IMAGE\}" "docker://\$\{IMAGE\}"`},
		{"step-buildpacks-build", `-report=/layers/report.toml "\$\{insecure\[@\]\}" -- "\$\{IMAGE\}"`},
		{"step-trivy-scan", `trivy image [^\n]* -- "\$\{IMAGE_REF\}"`},
		{"step-cosign-sign", `args: \["sign", [^\n]*"--", "\$\(params.IMAGE_REF\)"\]`},
		{"step-cosign-sign", `"--predicate", [^\n]*"--", "\$\(params.IMAGE_REF\)"\]`},
	} {
		found := false
		for _, cm := range testsupport.DefaultTemplates(t, templateNS) {
			if cm.Name == want.step {
				found = true
				assert.Regexp(t, want.pattern, cm.Data["task-spec.yaml"], want.step)
			}
		}
		assert.True(t, found, "no template %s", want.step)
	}
}

// cloneStep renders a dev build of revision and returns its clone task.
func cloneStep(t *testing.T, repo, revision string) tekton.PipelineTask {
	t.Helper()
	b := &v1alpha1.AgentBuild{
		ObjectMeta: metav1.ObjectMeta{Name: "weather-agent", Namespace: "agents", UID: "0b7c6f1e-0000-4000-8000-000000000001", Generation: 1},
		Spec: v1alpha1.AgentBuildSpec{
			Source:      v1alpha1.Source{Repository: repo, Revision: revision},
			Mode:        v1alpha1.ModeDev,
			BuildOutput: v1alpha1.BuildOutput{Image: "kagenti/weather-agent"},
		},
	}
	r, err := render(t, loader(t), b)
	require.NoError(t, err)
	for _, task := range r.Pipeline.Spec.Tasks {
		if task.Name == "clone" {
			return task
		}
	}
	t.Fatal("no clone task")
	return tekton.PipelineTask{}
}

// runStep runs the script of the task's only step as Tekton would: its environment with
// $(params.…), $(workspaces.…) and $(results.…) substituted, HOME in a temporary directory.
func runStep(t *testing.T, task tekton.PipelineTask, workspace, result string) (string, error) {
	t.Helper()
	require.Len(t, task.TaskSpec.Steps, 1)
	step := task.TaskSpec.Steps[0]
	vars := map[string]string{
		"workspaces.source.path":           workspace,
		"workspaces.git-credentials.bound": "false",
		"workspaces.git-credentials.path":  "",
		"results.COMMIT_SHA.path":          result,
	}
	for _, p := range task.Params {
		vars["params."+p.Name] = p.Value.StringVal
	}
	tektonVar := regexp.MustCompile(`\$\(([^)]+)\)`)
	env := []string{"PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1"}
	for _, e := range step.Env {
		v := tektonVar.ReplaceAllStringFunc(e.Value, func(m string) string {
			val, ok := vars[m[2:len(m)-1]]
			if !ok {
				t.Fatalf("env %s: unknown Tekton variable %s", e.Name, m)
			}
			return val
		})
		if e.Name == "HOME" {
			v = t.TempDir()
		}
		env = append(env, e.Name+"="+v)
	}
	script := filepath.Join(t.TempDir(), "script")
	require.NoError(t, os.WriteFile(script, []byte(step.Script), 0o700))
	cmd := exec.Command("sh", script)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// gitRepo makes a bare repository with one commit on main, tagged v1, and returns its file://
// URL and the commit.
func gitRepo(t *testing.T) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed to run the clone step: %v", err)
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "repo.git")
	git("init", "-q", "-b", "main", work)
	require.NoError(t, os.WriteFile(filepath.Join(work, "Dockerfile"), []byte("FROM scratch\n"), 0o644))
	git("-C", work, "add", "Dockerfile")
	git("-C", work, "commit", "-q", "-m", "agent")
	git("-C", work, "tag", "v1")
	git("clone", "-q", "--bare", work, bare)
	git("-C", bare, "config", "uploadpack.allowAnySHA1InWant", "true") // as git servers do for fetch by commit
	return "file://" + bare, git("-C", work, "rev-parse", "HEAD")
}

// TestCloneStepWithGit runs the rendered clone step with the real git against a local bare
// repository: branch, tag and commit are checked out, and a revision that is a git option
// (--upload-pack runs a command for local and ssh remotes) fails as a bad refspec without running
// anything.
func TestCloneStepWithGit(t *testing.T) {
	repo, commit := gitRepo(t)
	for _, rev := range []string{"main", "v1", commit, "refs/heads/main"} {
		t.Run(rev, func(t *testing.T) {
			workspace, result := t.TempDir(), filepath.Join(t.TempDir(), "COMMIT_SHA")
			out, err := runStep(t, cloneStep(t, repo, rev), workspace, result)
			require.NoError(t, err, out)
			got, err := os.ReadFile(result)
			require.NoError(t, err)
			assert.Equal(t, commit, string(got))
			assert.FileExists(t, filepath.Join(workspace, "src", "Dockerfile"))
		})
	}

	marker := filepath.Join(t.TempDir(), "injected")
	for _, rev := range []string{
		fmt.Sprintf("--upload-pack=touch %s; git-upload-pack", marker),
		fmt.Sprintf("--upload-pack=touch %s;git-upload-pack", marker),
	} {
		t.Run(rev, func(t *testing.T) {
			workspace, result := t.TempDir(), filepath.Join(t.TempDir(), "COMMIT_SHA")
			out, err := runStep(t, cloneStep(t, repo, rev), workspace, result)
			t.Logf("step output: %s", out)
			assert.Error(t, err, "the clone step must fail for a revision that is not a ref")
			assert.NoFileExists(t, marker, "the revision was run as a git option")
			assert.NoFileExists(t, result)
		})
	}
}
