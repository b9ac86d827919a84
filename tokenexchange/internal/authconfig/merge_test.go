package authconfig

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fill sets every field reachable from v to a value derived from seed: pointers allocated,
// strings and numbers non-zero, slices with two elements. A field added to Spec is filled too,
// so the merge tests fail until merge.go handles it.
func fill(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), seed)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), seed+i+1)
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fill(s.Index(0), seed)
		fill(s.Index(1), seed+100)
		v.Set(s)
	case reflect.String:
		v.SetString(fmt.Sprintf("v%d", seed))
	case reflect.Bool:
		v.SetBool(seed%2 == 0)
	case reflect.Int32, reflect.Int64:
		v.SetInt(int64(seed))
	default:
		panic("fill: unhandled kind " + v.Kind().String())
	}
}

func filled(seed int) Spec {
	var s Spec
	fill(reflect.ValueOf(&s).Elem(), seed)
	return s
}

func TestMergeKeepsEveryField(t *testing.T) {
	full := filled(1)
	assert.Equal(t, full, Merge(Spec{}, full), "every field set in the override is taken")
	assert.Equal(t, full, Merge(full, Spec{}), "every field left out of the override keeps the base value")
}

func TestMergeOverrideWins(t *testing.T) {
	base, over := filled(1), filled(1000)
	got := Merge(base, over)
	// Everything but the exclusion lists is over's.
	want := filled(1000)
	want.Inbound.ExcludePorts = union(base.Inbound.ExcludePorts, over.Inbound.ExcludePorts)
	want.Outbound.TrafficInterception.ExcludePorts = union(base.Outbound.TrafficInterception.ExcludePorts, over.Outbound.TrafficInterception.ExcludePorts)
	assert.Equal(t, want, got)
	assert.Len(t, got.Outbound.TrafficInterception.ExcludePorts, 4, "exclusions from both sides are kept")
}

func TestMergeSharesNoMemory(t *testing.T) {
	base, over := filled(1), filled(1000)
	got := Merge(base, over)
	got.Outbound.TokenExchange.DestinationRules[0].Target.Scopes[0] = "changed"
	got.Outbound.TokenExchange.DestinationRules[0].Target.Audience = "changed"
	*got.Spiffe.Enabled = !*got.Spiffe.Enabled
	got.Inbound.Validation.RequiredScopes[0] = "changed"
	assert.Equal(t, filled(1000), over, "the override is not modified through the result")
	assert.Equal(t, filled(1), base, "the base is not modified through the result")
}

func TestMergeEmptyListClears(t *testing.T) {
	base := Spec{Inbound: &InboundSpec{Validation: &ValidationSpec{RequiredScopes: []string{"a"}}}}
	over := Spec{Inbound: &InboundSpec{Validation: &ValidationSpec{RequiredScopes: []string{}}}}
	got := Merge(base, over)
	require.NotNil(t, got.Inbound.Validation.RequiredScopes)
	assert.Empty(t, got.Inbound.Validation.RequiredScopes, "an explicit empty list in config.yaml clears the default")
}
