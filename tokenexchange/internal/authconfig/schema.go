package authconfig

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/kagenti/platform/pkg/configmap/identity"
)

// Spec's fields are found by the paths of identity.Settings: a path's elements are the fields'
// JSON names (or, for a field config.yaml does not hold, its `path` tag). Reading the defaults
// (DefaultsFromEnv) and merging (Merge) walk Spec by them, so a setting added to the table and to
// Spec needs no code of its own here; TestSpecHasEveryFileSetting holds Spec to the table.

// fieldName is the path element of f: its JSON name, or its path tag when JSON skips it.
func fieldName(f reflect.StructField) string {
	if p, ok := f.Tag.Lookup("path"); ok {
		return p
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// field returns the field of struct v named elem.
func field(v reflect.Value, elem string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		if fieldName(t.Field(i)) == elem {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// setField sets the field of s at setting.Path to value, parsed per setting.Kind, allocating the
// sections on the way.
func setField(s *Spec, setting identity.Setting, value string) error {
	parsed, err := setting.Parse(value)
	if err != nil {
		return err
	}
	v := reflect.ValueOf(s).Elem()
	for elem := range strings.SplitSeq(setting.Path, ".") {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		f, ok := field(v, elem)
		if !ok {
			panic(fmt.Sprintf("identity setting %s: Spec has no field %s", setting.Path, elem))
		}
		v = f
	}
	pv := reflect.ValueOf(parsed)
	switch {
	case setting.Kind == identity.Ports:
		v.Set(reflect.ValueOf(union(nil, parsed.([]int32))))
	case v.Kind() == reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(pv.Convert(v.Type().Elem()))
		v.Set(p)
	default:
		v.Set(pv.Convert(v.Type()))
	}
	return nil
}
