package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

func TestReadCountsDocumentsAndExpandsLists(t *testing.T) {
	dir := t.TempDir()
	f := write(t, dir, "a.yaml", `# leading comment
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: one}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: two}}
---
# only a comment
---
apiVersion: v1
kind: ConfigMap
metadata: {name: three}
`)
	docs, err := Read([]string{f}, false, nil)
	require.NoError(t, err)
	var where []string
	for _, d := range docs {
		where = append(where, d.Object.GetName()+"@"+d.Where())
	}
	require.Equal(t, []string{"one@" + f + ", document 1, item 1", "two@" + f + ", document 1, item 2", "three@" + f + ", document 2"}, where)
}

func TestReadJSONStreamAndStdin(t *testing.T) {
	docs, err := Read([]string{"-"}, false, strings.NewReader(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}
{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"}}`))
	require.NoError(t, err)
	require.Len(t, docs, 2)
	require.Equal(t, "stdin, document 2", docs[1].Where())
}

func TestReadDirectories(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "b.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n")
	write(t, dir, "a.json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`)
	write(t, dir, "notes.txt", "not read")
	write(t, dir, "sub/c.yml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
	docs, err := Read([]string{dir}, false, nil)
	require.NoError(t, err)
	require.Len(t, docs, 2, "a directory without -R reads only its own files")
	docs, err = Read([]string{dir}, true, nil)
	require.NoError(t, err)
	require.Len(t, docs, 3)
}

func TestReadErrorsNameTheDocument(t *testing.T) {
	dir := t.TempDir()
	f := write(t, dir, "bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\nmetadata: {name: nokind}\n")
	_, err := Read([]string{f}, false, nil)
	require.EqualError(t, err, f+", document 2: not a Kubernetes object: apiVersion and kind are required")
	_, err = Read([]string{filepath.Join(dir, "missing.yaml")}, false, nil)
	require.ErrorContains(t, err, "missing.yaml")
}
