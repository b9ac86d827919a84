package migrate

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Path is a field path in an object: map keys, and list indices written "[i]".
type Path []string

// P builds a Path from dotted segments ("spec.imageSource.image"); use Key for map keys that
// contain dots (label keys) and Index for list items.
func P(dotted string, more ...string) Path {
	var p Path
	if dotted != "" {
		p = append(p, strings.Split(dotted, ".")...)
	}
	return append(p, more...)
}

// Index is the path segment of a list item.
func Index(i int) string { return "[" + strconv.Itoa(i) + "]" }

// Child returns p extended by segments (never aliasing p's backing array).
func (p Path) Child(segments ...string) Path {
	out := make(Path, 0, len(p)+len(segments))
	return append(append(out, p...), segments...)
}

// HasPrefix reports whether q starts with p.
func (p Path) HasPrefix(q Path) bool {
	if len(q) > len(p) {
		return false
	}
	for i := range q {
		if p[i] != q[i] {
			return false
		}
	}
	return true
}

// String renders the path the way kubectl explain does (spec.template.spec.containers[0].image),
// quoting map keys that contain dots or slashes: metadata.labels["app.kubernetes.io/name"].
func (p Path) String() string {
	var b strings.Builder
	for _, s := range p {
		switch {
		case strings.HasPrefix(s, "["):
			b.WriteString(s)
		case strings.ContainsAny(s, "./ \"[]"):
			b.WriteString("[" + strconv.Quote(s) + "]")
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		}
	}
	return b.String()
}

func (p Path) key() string { return strings.Join(p, "\x00") }

// Lookup returns the value at p in obj (maps and lists as decoded from JSON).
func Lookup(obj any, p Path) (any, bool) {
	cur := obj
	for _, s := range p {
		if strings.HasPrefix(s, "[") {
			list, ok := cur.([]any)
			if !ok {
				return nil, false
			}
			i, err := strconv.Atoi(strings.Trim(s, "[]"))
			if err != nil || i < 0 || i >= len(list) {
				return nil, false
			}
			cur = list[i]
			continue
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[s]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// leaf is a scalar of the input, or an empty map or list (which carry meaning too: `env: []`).
type leaf struct {
	path  Path
	value any
}

func flatten(v any, prefix Path, out *[]leaf) {
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 {
			*out = append(*out, leaf{prefix, t})
			return
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			flatten(t[k], prefix.Child(k), out)
		}
	case []any:
		if len(t) == 0 {
			*out = append(*out, leaf{prefix, t})
			return
		}
		for i, e := range t {
			flatten(e, prefix.Child(Index(i)), out)
		}
	default:
		*out = append(*out, leaf{prefix, t})
	}
}

// disposition is what became of one leaf of a legacy object.
type disposition struct {
	// migrated: the value is carried over (To says where) or used to derive something (Note says how).
	migrated bool
	to       string
	reason   string
}

// Ledger accounts for every leaf of one legacy object: each is either migrated or reported as not
// migrated, with a reason. Marks apply to every leaf under a prefix that is not marked yet, so the
// specific cases come first and a general rule ("status: observed state") last.
type Ledger struct {
	source Source
	leaves []leaf
	marks  map[string]disposition
	// carried records verbatim copies (source prefix → object and path), which tests verify value by
	// value against the output.
	carried []Carry
	// groups remembers the prefixes reported as not migrated, so the report names a subtree once.
	groups []Finding
}

// Carry is a verbatim copy of a subtree of a legacy object into an output object.
type Carry struct {
	From   Path
	Object string // "Kind/name" of the output object
	To     Path
}

// NewLedger flattens obj into its leaves.
func NewLedger(src Source, obj map[string]any) *Ledger {
	l := &Ledger{source: src, marks: map[string]disposition{}}
	flatten(obj, nil, &l.leaves)
	return l
}

// Has reports whether the object has at least one leaf under p.
func (l *Ledger) Has(p Path) bool {
	for _, lf := range l.leaves {
		if lf.path.HasPrefix(p) {
			return true
		}
	}
	return false
}

func (l *Ledger) mark(p Path, d disposition) int {
	n := 0
	for _, lf := range l.leaves {
		if !lf.path.HasPrefix(p) {
			continue
		}
		if _, done := l.marks[lf.path.key()]; done {
			continue
		}
		l.marks[lf.path.key()] = d
		n++
	}
	return n
}

// Copied records that the subtree at from was copied verbatim to path to of output object obj
// ("Kind/name").
func (l *Ledger) Copied(from Path, obj string, to Path) {
	if l.mark(from, disposition{migrated: true, to: obj + " " + to.String()}) > 0 {
		l.carried = append(l.carried, Carry{From: from, Object: obj, To: to})
	}
}

// Used records that the subtree at p was migrated in a transformed form (how says what became of it).
func (l *Ledger) Used(p Path, how string) {
	l.mark(p, disposition{migrated: true, to: how})
}

// NotMigrated reports the subtree at p as not migrated, with the reason.
func (l *Ledger) NotMigrated(p Path, reason string) {
	if n := l.mark(p, disposition{reason: reason}); n > 0 {
		l.groups = append(l.groups, Finding{Source: l.source, Path: p.String(), Leaves: n, Reason: reason})
	}
}

// Close reports every leaf nobody accounted for as a field migrate does not know (a newer version of
// the legacy API, or a typo): nothing is dropped silently.
func (l *Ledger) Close() {
	for _, lf := range l.leaves {
		if _, done := l.marks[lf.path.key()]; !done {
			l.NotMigrated(lf.path, fmt.Sprintf("not a field of %s that migrate knows; nothing was made of it", l.source.Kind))
		}
	}
}

// Findings are the not-migrated subtrees, in the order they were reported.
func (l *Ledger) Findings() []Finding { return l.groups }

// Carried are the verbatim copies.
func (l *Ledger) Carried() []Carry { return l.carried }

// Unaccounted lists leaves without a disposition (empty after Close).
func (l *Ledger) Unaccounted() []Path {
	var out []Path
	for _, lf := range l.leaves {
		if _, done := l.marks[lf.path.key()]; !done {
			out = append(out, lf.path)
		}
	}
	return out
}

// verify checks every verbatim copy against the output objects (keyed "namespace/Kind/name"): a
// value the output lacks was dropped on the way (a field the Kubernetes or pillar API types do not
// have) and is reported as not migrated; a value the output holds in another form (a quantity
// written canonically) is recorded as migrated in that form.
func (l *Ledger) verify(outputs map[string]map[string]any) {
	for _, c := range l.carried {
		out, ok := outputs[l.source.Namespace+"/"+c.Object]
		for _, lf := range l.leaves {
			if !lf.path.HasPrefix(c.From) {
				continue
			}
			dst := c.To.Child(lf.path[len(c.From):]...)
			var got any
			found := false
			if ok {
				got, found = Lookup(out, dst)
			}
			switch {
			case !found && isEmpty(lf.value):
				l.marks[lf.path.key()] = disposition{migrated: true, to: "empty: the same as leaving it out"}
			case !found:
				reason := fmt.Sprintf("%s has no field %s: the value was lost on the way (not part of its API)", c.Object, dst)
				l.marks[lf.path.key()] = disposition{reason: reason}
				l.groups = append(l.groups, Finding{Source: l.source, Path: lf.path.String(), Leaves: 1, Reason: reason})
			case !sameValue(got, lf.value):
				l.marks[lf.path.key()] = disposition{migrated: true, to: fmt.Sprintf("%s %s as %v (its canonical form)", c.Object, dst, got)}
			}
		}
	}
}

// sameValue compares decoded JSON values, numbers by value whatever their Go type.
func sameValue(a, b any) bool {
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		return ok && fa == fb
	}
	switch ta := a.(type) {
	case map[string]any:
		tb, ok := b.(map[string]any)
		if !ok || len(ta) != len(tb) {
			return false
		}
		for k, v := range ta {
			if !sameValue(v, tb[k]) {
				return false
			}
		}
		return true
	case []any:
		tb, ok := b.([]any)
		if !ok || len(ta) != len(tb) {
			return false
		}
		for i := range ta {
			if !sameValue(ta[i], tb[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func isEmpty(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	case nil:
		return true
	}
	return false
}
