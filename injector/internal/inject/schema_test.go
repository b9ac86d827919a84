package inject

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/pkg/configmap/identity"
)

// injectorOnly are the fields of the injector's identity configuration that are no identity
// setting of the data plane: the Secret it mounts into the pod.
var injectorOnly = []string{"identity.idpCredentialsSecret"}

// Every variable of the identity table reaches defaults.env: from the workload (its switches and
// annotations) or from the field of the injector's configuration the row names; a value that
// differs from what the data plane assumes is written as the row's line. And every field of the
// injector's identity configuration is a row's (or injectorOnly): a field added to one and not to
// the other fails here.
func TestEverySettingReachesTheInjector(t *testing.T) {
	cfg := config.Default()
	for _, s := range identity.Settings {
		if s.Injector != "" && !hasConfigField(s.Injector) {
			t.Fatalf("%s: the injector's configuration has no %s", s.Path, s.Injector)
		}
	}
	w := workloadOf(cfg, Options{Workload: "w", Spiffe: true})
	fields := map[string]bool{}
	for _, s := range identity.Settings {
		if s.Env == "" {
			continue
		}
		if _, ok := w.setting(s.Path); ok && s.Injector == "" {
			continue
		}
		if !assert.NotEmpty(t, s.Injector, "%s: neither the workload nor the configuration gives %s", s.Path, s.Env) {
			continue
		}
		fields[s.Injector] = true
		t.Run(s.Env, func(t *testing.T) {
			cfg := config.Default()
			v := setConfigValue(t, cfg, s.Injector)
			out := identityDefaults(cfg, Options{Workload: "w", Spiffe: true})
			assert.Contains(t, strings.Split(out, "\n"), s.Env+"="+v, "%s=%s is written", s.Injector, v)
		})
	}
	for _, f := range injectorOnly {
		fields[f] = true
	}
	for _, p := range jsonLeaves(reflect.TypeFor[config.Identity](), "identity.") {
		assert.True(t, fields[p], "the injector's %s is no row of identity.Settings", p)
	}
}

// hasConfigField reports whether the injector's configuration has a field at path.
func hasConfigField(path string) bool {
	v := reflect.ValueOf(config.Default()).Elem()
	for elem := range strings.SplitSeq(path, ".") {
		f, ok := jsonField(v, elem)
		if !ok {
			return false
		}
		v = f
	}
	return true
}

// setConfigValue sets the field of cfg at path to a value no default has, and returns it as
// its variable carries it.
func setConfigValue(t *testing.T, cfg *config.Config, path string) string {
	t.Helper()
	v := reflect.ValueOf(cfg).Elem()
	for elem := range strings.SplitSeq(path, ".") {
		f, ok := jsonField(v, elem)
		if !ok {
			t.Fatalf("the injector's configuration has no %s", path)
		}
		v = f
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(!v.Bool())
		return strconv.FormatBool(v.Bool())
	case reflect.Int32, reflect.Int64:
		v.SetInt(4242)
		return "4242"
	default:
		v.SetString("https://changed.example/" + path)
		return v.String()
	}
}

// jsonLeaves returns the JSON paths of the value fields of struct type t.
func jsonLeaves(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type.Kind() == reflect.Struct {
			out = append(out, jsonLeaves(f.Type, prefix+name+".")...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}
