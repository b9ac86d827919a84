package migrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// WriteYAML writes the objects as one YAML stream; a comment above each says what it was made from
// and what migrate decided for it.
func WriteYAML(w io.Writer, objs []*Object) error {
	for i, o := range objs {
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if err := writeObject(w, o); err != nil {
			return err
		}
	}
	return nil
}

func writeObject(w io.Writer, o *Object) error {
	var b bytes.Buffer
	for _, c := range header(o) {
		fmt.Fprintf(&b, "# %s\n", c)
	}
	raw, err := yaml.Marshal(o.Object)
	if err != nil {
		return fmt.Errorf("%s: %w", o.Ref(), err)
	}
	b.Write(raw)
	_, err = w.Write(b.Bytes())
	return err
}

func header(o *Object) []string {
	var lines []string
	for _, s := range o.From {
		lines = append(lines, "from "+s.String())
	}
	for _, n := range o.Notes {
		lines = append(lines, "note: "+n)
	}
	return lines
}

// WriteJSON writes the objects as one v1 List, as kubectl get -o json does.
func WriteJSON(w io.Writer, objs []*Object) error {
	items := make([]any, 0, len(objs))
	for _, o := range objs {
		items = append(items, o.Object)
	}
	raw, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "    ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(raw, '\n'))
	return err
}

// FileName is the file an object is written to with -o DIR: "<namespace>.<kind>.<name>.yaml" in
// lower case ("<kind>.<name>.yaml" without namespace).
func FileName(o *Object) string {
	parts := []string{strings.ToLower(o.GetKind()), o.GetName()}
	if ns := o.GetNamespace(); ns != "" {
		parts = append([]string{ns}, parts...)
	}
	return strings.Join(parts, ".") + ".yaml"
}

// WriteDir writes one file per object into dir (created when missing) and returns their paths.
func WriteDir(dir string, objs []*Object) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var paths []string
	for _, o := range objs {
		name := FileName(o)
		if seen[name] {
			return nil, fmt.Errorf("two objects would be written to %s", name)
		}
		seen[name] = true
		var b bytes.Buffer
		if err := writeObject(&b, o); err != nil {
			return nil, err
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// WriteReport writes what was not migrated, per legacy object, with the reasons: the paths that
// share a reason on one line. It writes nothing when everything was migrated.
func WriteReport(w io.Writer, findings []Finding) error {
	if len(findings) == 0 {
		return nil
	}
	var b bytes.Buffer
	leaves, objects := 0, map[Source]bool{}
	for _, f := range findings {
		leaves += f.Leaves
		objects[f.Source] = true
	}
	fmt.Fprintf(&b, "Not migrated: %d %s of %d legacy %s\n", leaves, plural(leaves, "value", "values"), len(objects), plural(len(objects), "object", "objects"))
	for start := 0; start < len(findings); {
		src := findings[start].Source
		end := start
		for end < len(findings) && findings[end].Source == src {
			end++
		}
		fmt.Fprintf(&b, "  %s\n", src)
		for _, g := range byReason(findings[start:end]) {
			count := ""
			if g.leaves > 1 {
				count = fmt.Sprintf(" (%d values)", g.leaves)
			}
			fmt.Fprintf(&b, "    %s%s: %s\n", strings.Join(g.paths, ", "), count, g.reason)
		}
		start = end
	}
	_, err := w.Write(b.Bytes())
	return err
}

type reasonGroup struct {
	reason string
	paths  []string
	leaves int
}

// byReason groups one object's findings by reason, in the order the reasons first appear.
func byReason(findings []Finding) []*reasonGroup {
	var out []*reasonGroup
	index := map[string]*reasonGroup{}
	for _, f := range findings {
		g, ok := index[f.Reason]
		if !ok {
			g = &reasonGroup{reason: f.Reason}
			index[f.Reason] = g
			out = append(out, g)
		}
		g.paths = append(g.paths, f.Path)
		g.leaves += f.Leaves
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
