package authconfig

import (
	"reflect"
	"slices"

	"github.com/kagenti/platform/pkg/configmap/identity"
)

// Merge returns over laid over base: a field set in over wins, a field over leaves out keeps
// base's value. Lists replace, except those whose setting merges by identity.Union (the two
// port-exclusion lists): a port the workload's annotation excludes from interception stays
// excluded whatever a TokenExchange says. Neither argument is modified, and the result shares no
// memory with them.
//
// One rule for every field, driven by identity.Settings: sections (pointers to structs) merge
// field by field, a pointer or a non-empty string that over sets wins, a list that over sets
// (even empty: it clears base's) replaces or, for Union, joins base's.
func Merge(base, over Spec) Spec {
	var out Spec
	mergeInto(reflect.ValueOf(&out).Elem(), reflect.ValueOf(base), reflect.ValueOf(over), "")
	return out
}

// mergeInto sets dst, a struct of the same type as b and o, to o over b; prefix is their path.
func mergeInto(dst, b, o reflect.Value, prefix string) {
	t := dst.Type()
	for i := range t.NumField() {
		path := fieldName(t.Field(i))
		if prefix != "" {
			path = prefix + "." + path
		}
		d, x, y := dst.Field(i), b.Field(i), o.Field(i)
		switch {
		case d.Kind() == reflect.Pointer && d.Type().Elem().Kind() == reflect.Struct:
			if x.IsNil() && y.IsNil() {
				continue
			}
			d.Set(reflect.New(d.Type().Elem()))
			mergeInto(d.Elem(), elemOrZero(x), elemOrZero(y), path)
		case d.Kind() == reflect.Slice:
			if s, ok := identity.Lookup(path); ok && s.Merge == identity.Union {
				d.Set(reflect.ValueOf(union(x.Interface().([]int32), y.Interface().([]int32))))
			} else if !y.IsNil() {
				d.Set(deepCopy(y))
			} else {
				d.Set(deepCopy(x))
			}
		case d.Kind() == reflect.Pointer:
			if !y.IsNil() {
				d.Set(deepCopy(y))
			} else {
				d.Set(deepCopy(x))
			}
		case d.Kind() == reflect.String:
			if y.String() != "" {
				d.Set(y)
			} else {
				d.Set(x)
			}
		default:
			d.Set(deepCopy(y)) // a struct field (none in Spec today): over's, as for a required value
		}
	}
}

// elemOrZero is what the pointer p points to, or the zero value of its element type.
func elemOrZero(p reflect.Value) reflect.Value {
	if p.IsNil() {
		return reflect.Zero(p.Type().Elem())
	}
	return p.Elem()
}

// deepCopy returns a copy of v sharing no memory with it (pointers, slices and structs of them).
func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(deepCopy(v.Elem()))
		return p
	case reflect.Slice:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		s := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			s.Index(i).Set(deepCopy(v.Index(i)))
		}
		return s
	case reflect.Struct:
		s := reflect.New(v.Type()).Elem()
		for i := range v.NumField() {
			s.Field(i).Set(deepCopy(v.Field(i)))
		}
		return s
	default:
		return v
	}
}

func value[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func str(base, over string) string {
	if over != "" {
		return over
	}
	return base
}

// union returns the sorted, de-duplicated union; nil when both are nil.
func union(base, over []int32) []int32 {
	if base == nil && over == nil {
		return nil
	}
	out := append(slices.Clone(base), over...)
	slices.Sort(out)
	return slices.Compact(out)
}
