package authconfig_test

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/pkg/configmap/identity"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// leaves returns the paths of the value fields of struct type t (JSON names; a field JSON skips
// counts under its path tag, or not at all), descending into sections (structs and pointers to
// them), with the Go type of each.
func leaves(t reflect.Type, prefix string, out map[string]reflect.Type) map[string]reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if p, ok := f.Tag.Lookup("path"); ok {
			name = p
		}
		if name == "-" || name == "" {
			continue
		}
		path := prefix + name
		ft := f.Type
		if ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			leaves(ft, path+".", out)
			continue
		}
		out[path] = f.Type
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func rows(keep func(identity.Setting) bool) []string {
	var out []string
	for _, s := range identity.Settings {
		if keep(s) {
			out = append(out, s.Path)
		}
	}
	sort.Strings(out)
	return out
}

// Every field of the TokenExchange API is a row of the identity table, and every row the API
// holds is a field of it: a field added to the CRD types and not to the table (or the reverse)
// fails here.
func TestTheAPIHoldsExactlyTheTablesSettings(t *testing.T) {
	api := leaves(reflect.TypeFor[v1alpha1.TokenExchangeSpec](), "", map[string]reflect.Type{})
	for p := range api {
		if strings.HasPrefix(p, "targetRef.") {
			delete(api, p) // which workload, not a setting
		}
	}
	assert.Equal(t, rows(func(s identity.Setting) bool { return s.CRD != identity.Absent }), sortedKeys(api))
}

// The data plane's Spec has a field for every row that config.yaml or a variable sets, of the
// row's kind: config.yaml's fields for the rows in the file, a path-tagged field for the ones only
// the environment sets.
func TestSpecHoldsExactlyTheTablesSettings(t *testing.T) {
	spec := leaves(reflect.TypeFor[authconfig.Spec](), "", map[string]reflect.Type{})
	held := func(s identity.Setting) bool { return !s.NotInFile || s.Env != "" }
	assert.Equal(t, rows(held), sortedKeys(spec))
	goType := map[identity.Kind]reflect.Type{
		identity.String:      reflect.TypeFor[string](),
		identity.Bool:        reflect.TypeFor[*bool](),
		identity.Port:        reflect.TypeFor[*int32](),
		identity.UID:         reflect.TypeFor[*int64](),
		identity.Ports:       reflect.TypeFor[[]int32](),
		identity.Strings:     reflect.TypeFor[[]string](),
		identity.Rules:       reflect.TypeFor[[]authconfig.DestinationRule](),
		identity.Seconds:     reflect.TypeFor[*int32](),
		identity.AuthzRules:  reflect.TypeFor[[]authconfig.AuthorizationRule](),
		identity.Count:       reflect.TypeFor[*int32](),
		identity.EgressRules: reflect.TypeFor[[]authconfig.EgressRule](),
	}
	for _, s := range identity.Settings {
		if held(s) {
			assert.Equal(t, goType[s.Kind], spec[s.Path], "%s is a %s", s.Path, s.Kind)
		}
	}
	// config.yaml holds exactly the rows in the file.
	var file []string
	for p := range leaves(reflect.TypeFor[authconfig.Spec](), "", map[string]reflect.Type{}) {
		if _, err := authconfig.Parse([]byte(yamlSetting(p))); err == nil {
			file = append(file, p)
		}
	}
	sort.Strings(file)
	assert.Equal(t, rows(func(s identity.Setting) bool { return !s.NotInFile }), file)
}

// yamlSetting is a config.yaml setting path to null: accepted exactly when the field exists.
func yamlSetting(path string) string {
	var b strings.Builder
	for i, e := range strings.Split(path, ".") {
		b.WriteString(strings.Repeat("  ", i) + e + ":\n")
	}
	return b.String()
}

// Every variable of the table reaches its field: DefaultsFromEnv sets the field at the row's path
// and nothing else.
func TestEveryVariableSetsTheFieldOfItsRow(t *testing.T) {
	sample := map[identity.Kind]string{identity.String: "sample", identity.Bool: "false", identity.Port: "4242",
		identity.UID: "4242", identity.Ports: "4242,4243", identity.Seconds: "30"}
	for _, s := range identity.Settings {
		if s.Env == "" {
			continue
		}
		t.Run(s.Env+"/"+s.Path, func(t *testing.T) {
			spec, err := authconfig.DefaultsFromEnv(func(n string) (string, bool) { return sample[s.Kind], n == s.Env })
			require.NoError(t, err)
			var set []string
			collectSet(reflect.ValueOf(spec), "", &set)
			assert.Contains(t, set, s.Path)
			for _, p := range set {
				other, _ := identity.Lookup(p)
				assert.Equal(t, s.Env, other.Env, "%s sets only the fields of its rows", s.Env)
			}
			bad, err := authconfig.DefaultsFromEnv(func(n string) (string, bool) { return "not-a-value", n == s.Env })
			if s.Kind == identity.String {
				require.NoError(t, err)
				assert.Equal(t, spec, authconfig.Merge(authconfig.Spec{}, spec), "merged as set")
				_ = bad
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), s.Env)
		})
	}
}

// collectSet appends the paths of the fields of v that are set (non-nil, non-empty).
func collectSet(v reflect.Value, prefix string, out *[]string) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if p, ok := f.Tag.Lookup("path"); ok {
			name = p
		}
		fv := v.Field(i)
		if fv.IsZero() {
			continue
		}
		if fv.Kind() == reflect.Pointer && fv.Elem().Kind() == reflect.Struct {
			collectSet(fv.Elem(), prefix+name+".", out)
			continue
		}
		*out = append(*out, prefix+name)
	}
}

// The settings that take effect only at pod start are the table's.
func TestStartupSettingsAreTheTables(t *testing.T) {
	var got []string
	for _, s := range authconfig.StartupSettings {
		got = append(got, s.Path)
	}
	slices.Sort(got)
	assert.Equal(t, rows(func(s identity.Setting) bool { return s.StartupOnly }), got)
}
