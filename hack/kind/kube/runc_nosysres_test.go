// Tests of hack/kind/runc-nosysres, the runc wrapper dockerd uses where the machine's capability
// bounding set lacks CAP_SYS_RESOURCE. Run with `cd hack/kind/kube && GOWORK=off go test .`.
package kube_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var allSets = []string{"bounding", "effective", "inheritable", "permitted", "ambient"}

// fakeRunc puts a "runc" first on PATH that records its arguments, and returns where it records them.
func fakeRunc(t *testing.T) (path, argsFile string) {
	t.Helper()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is not installed (the wrapper needs it; hack/kind-up.sh installs it)")
	}
	dir := t.TempDir()
	argsFile = filepath.Join(dir, "args")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + argsFile + "\n"
	if err := os.WriteFile(filepath.Join(dir, "runc"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir + string(os.PathListSeparator) + os.Getenv("PATH"), argsFile
}

func capabilities(caps ...string) map[string]any {
	m := map[string]any{}
	for _, s := range allSets {
		m[s] = caps
	}
	return m
}

func runWrapper(t *testing.T, path string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "runc-nosysres"), args...)
	cmd.Env = append(os.Environ(), "PATH="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("runc-nosysres %v: %v\n%s", args, err, out)
	}
}

func readCaps(t *testing.T, file string, underProcess bool) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if underProcess {
		doc = doc["process"].(map[string]any)
	}
	out := map[string][]string{}
	for set, v := range doc["capabilities"].(map[string]any) {
		for _, c := range v.([]any) {
			out[set] = append(out[set], c.(string))
		}
	}
	return out
}

func TestRuncNoSysResourceDropsTheCapabilityFromTheBundle(t *testing.T) {
	path, argsFile := fakeRunc(t)
	bundle := t.TempDir()
	spec := map[string]any{"ociVersion": "1.0.2", "process": map[string]any{
		"args": []string{"/sbin/init"}, "capabilities": capabilities("CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"),
	}}
	raw, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--root", "/run/x", "create", "--bundle", bundle, "c1"},
		{"create", "--bundle=" + bundle, "c1"},
		{"run", "-b", bundle, "c1"},
	} {
		runWrapper(t, path, args...)
		got := readCaps(t, filepath.Join(bundle, "config.json"), true)
		for _, set := range allSets {
			if want := []string{"CAP_CHOWN", "CAP_SYS_ADMIN"}; !slices.Equal(got[set], want) {
				t.Errorf("%v: %s = %v, want %v", args, set, got[set], want)
			}
		}
		recorded, _ := os.ReadFile(argsFile)
		if strings.Join(args, "\n")+"\n" != string(recorded) {
			t.Errorf("runc got %q, want the wrapper's arguments %q", recorded, args)
		}
	}
}

func TestRuncNoSysResourceDropsTheCapabilityFromAnExecProcess(t *testing.T) {
	path, _ := fakeRunc(t)
	process := filepath.Join(t.TempDir(), "process.json")
	raw, _ := json.Marshal(map[string]any{"args": []string{"sh"}, "capabilities": capabilities("CAP_SYS_RESOURCE", "CAP_NET_ADMIN")})
	if err := os.WriteFile(process, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	runWrapper(t, path, "exec", "--process", process, "--detach", "c1")
	got := readCaps(t, process, false)
	for _, set := range allSets {
		if want := []string{"CAP_NET_ADMIN"}; !slices.Equal(got[set], want) {
			t.Errorf("%s = %v, want %v", set, got[set], want)
		}
	}
}

func TestRuncNoSysResourcePassesOtherCommandsThrough(t *testing.T) {
	path, argsFile := fakeRunc(t)
	runWrapper(t, path, "--version")
	recorded, _ := os.ReadFile(argsFile)
	if string(recorded) != "--version\n" {
		t.Fatalf("runc got %q", recorded)
	}
}
