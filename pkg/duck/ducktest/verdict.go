// Package ducktest holds test support for controllers built on pkg/duck. Import it only from
// _test.go files: it links gopher-lua, which no controller binary needs.
package ducktest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// ArgoCDDir is deploy/gitops/argocd, where the shipped Argo CD health script and the kustomization
// that puts it into argocd-cm live. It is found from this file's path, so it holds in the go.work
// checkout the tests run in.
func ArgoCDDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "gitops", "argocd")
}

// Verdict is what GitOps tools conclude from an object's status.
type Verdict struct {
	// Kstatus is sigs.k8s.io/cli-utils kstatus (Flux, kubectl-wait tooling): Current, InProgress, Failed.
	Kstatus        status.Status
	KstatusMessage string
	// Argo is the shipped Argo CD health script's status: Healthy, Progressing, Degraded.
	Argo        string
	ArgoMessage string
}

// Verdicts computes kstatus and runs the shipped health.lua with gopher-lua (the Lua implementation
// Argo CD embeds) on obj. Pass obj as both tools read it: unstructured, from the API server.
func Verdicts(t testing.TB, obj *unstructured.Unstructured) Verdict {
	t.Helper()
	res, err := status.Compute(obj)
	if err != nil {
		t.Fatalf("kstatus: %v", err)
	}
	script, err := os.ReadFile(filepath.Join(ArgoCDDir(), "health.lua"))
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
		Kstatus:        res.Status,
		KstatusMessage: res.Message,
		Argo:           ret.RawGetString("status").String(),
		ArgoMessage:    ret.RawGetString("message").String(),
	}
}

// AssertVerdict checks both tools' verdicts on obj; state names the situation in failure messages.
func AssertVerdict(t testing.TB, obj *unstructured.Unstructured, wantKstatus status.Status, wantArgo, state string) {
	t.Helper()
	v := Verdicts(t, obj)
	assert.Equal(t, wantKstatus, v.Kstatus, "kstatus, %s: %s", state, v.KstatusMessage)
	assert.Equal(t, wantArgo, v.Argo, "Argo CD health, %s: %s", state, v.ArgoMessage)
}

// toLua converts an unstructured value the way Argo CD hands objects to health scripts: maps and
// lists become tables, JSON numbers Lua numbers.
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
