package authconfig

import (
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// flatten returns the dotted paths of the leaves of a YAML document.
func flatten(t *testing.T, doc []byte) []string {
	t.Helper()
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(doc, &m))
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if mm, ok := v.(map[string]any); ok {
			for k, c := range mm {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, c)
			}
			return
		}
		out = append(out, prefix)
	}
	walk("", m)
	sort.Strings(out)
	return out
}
