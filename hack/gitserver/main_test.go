package main

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// git runs git in dir and returns its output, failing the test on an error.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir(),
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func backendPath(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("git is not installed: %v", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no git-http-backend: %v", err)
	}
	return p
}

// A shallow fetch of a branch, as the AgentBuild clone step does it, gets the commit; a push is
// refused.
func TestShallowFetchWorksAndPushIsRefused(t *testing.T) {
	backend := backendPath(t)
	work, root := t.TempDir(), t.TempDir()
	git(t, work, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("agent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, work, "add", "README")
	git(t, work, "commit", "-q", "-m", "first")
	want := git(t, work, "rev-parse", "HEAD")
	git(t, root, "clone", "-q", "--bare", work, "agent.git")

	srv := httptest.NewServer(handler(backend, root))
	defer srv.Close()
	dest := t.TempDir()
	git(t, dest, "init", "-q")
	git(t, dest, "remote", "add", "--", "origin", srv.URL+"/agent.git")
	git(t, dest, "fetch", "-q", "--depth", "1", "--", "origin", "main")
	if got := git(t, dest, "rev-parse", "FETCH_HEAD"); got != want {
		t.Fatalf("fetched %s, want %s", got, want)
	}

	cmd := exec.Command("git", "push", "-q", srv.URL+"/agent.git", "HEAD:refs/heads/other")
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("push was accepted: %s", out)
	}
}
