package testsupport

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// Verdict is what GitOps tools conclude from an object's status.
type Verdict struct {
	// Kstatus is sigs.k8s.io/cli-utils kstatus (Flux, kubectl-wait tooling): Current, InProgress, Failed.
	Kstatus status.Status
	// Argo is the shipped Argo CD health script's status: Healthy, Progressing, Degraded.
	Argo string
	// Message joins both tools' messages, for failures.
	Message string
}

// Verdicts computes kstatus and runs deploy/gitops/argocd/health.lua with gopher-lua (the Lua
// implementation Argo CD embeds) on obj, as both tools read it: unstructured, from the API server.
func Verdicts(t testing.TB, obj *unstructured.Unstructured) Verdict {
	t.Helper()
	res, err := status.Compute(obj)
	if err != nil {
		t.Fatalf("kstatus: %v", err)
	}
	script, err := os.ReadFile(filepath.Join(RepoRoot(), "deploy", "gitops", "argocd", "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	L := lua.NewState()
	defer L.Close()
	L.SetGlobal("obj", toLua(L, obj.Object))
	if err := L.DoString(string(script)); err != nil {
		t.Fatalf("health.lua: %v", err)
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("health.lua returned %s, not a table", L.Get(-1).Type())
	}
	return Verdict{
		Kstatus: res.Status,
		Argo:    ret.RawGetString("status").String(),
		Message: fmt.Sprintf("kstatus: %s; Argo CD: %s", res.Message, ret.RawGetString("message").String()),
	}
}

func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case nil:
		return lua.LNil
	}
	panic(fmt.Sprintf("unexpected %T in an unstructured object", v))
}
