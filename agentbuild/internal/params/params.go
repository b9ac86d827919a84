// Package params resolves the value of every parameter a build step declares.
//
// The order is the seed design's, highest priority first:
//
//  1. the AgentBuild's parameters (spec.pipeline.parameters, then values derived from the spec such as
//     SOURCE_REPO_URL from spec.source.repository);
//  2. the step's parameters (the AgentBuild's spec.pipeline.steps[].parameters, then the template step's);
//  3. the template's global parameters;
//  4. the step's own defaults (params[].default in its Tekton TaskSpec).
//
// Only parameters the step declares are passed to it: Tekton rejects a task that receives a
// parameter it does not declare, and a global parameter meant for another step is not an error.
package params

import (
	"fmt"
	"sort"
	"strings"
)

// Param is a name and a string value.
type Param struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Origin says which layer a resolved value came from.
type Origin string

const (
	FromBuild    Origin = "build"
	FromStep     Origin = "step"
	FromTemplate Origin = "template"
	FromDefault  Origin = "default"
)

// Declared is a parameter a step's TaskSpec declares; Default is nil when it has none.
type Declared struct {
	Name    string
	Default *string
}

// Layers are the sources of values, each ordered with the first occurrence of a name winning.
type Layers struct {
	Build    []Param
	Step     []Param
	Template []Param
}

// Value is one resolved parameter.
type Value struct {
	Name   string
	Value  string
	Origin Origin
}

// MissingError names parameters that have no value from any layer and no default.
type MissingError struct {
	Step  string // empty for the template's required parameters
	Names []string
}

func (e *MissingError) Error() string {
	where := "the template requires"
	if e.Step != "" {
		where = fmt.Sprintf("step %q requires", e.Step)
	}
	return fmt.Sprintf("%s parameter(s) %s with no value: set them in spec.pipeline.parameters",
		where, strings.Join(e.Names, ", "))
}

// Resolve returns a value for every declared parameter, in declaration order, or a *MissingError
// naming (sorted) every declared parameter without a value.
func Resolve(step string, declared []Declared, l Layers) ([]Value, error) {
	out := make([]Value, 0, len(declared))
	var missing []string
	for _, d := range declared {
		v, ok := lookup(d, l)
		if !ok {
			missing = append(missing, d.Name)
			continue
		}
		out = append(out, v)
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, &MissingError{Step: step, Names: missing}
	}
	return out, nil
}

func lookup(d Declared, l Layers) (Value, bool) {
	for _, layer := range []struct {
		params []Param
		origin Origin
	}{{l.Build, FromBuild}, {l.Step, FromStep}, {l.Template, FromTemplate}} {
		if v, ok := find(layer.params, d.Name); ok {
			return Value{Name: d.Name, Value: v, Origin: layer.origin}, true
		}
	}
	if d.Default != nil {
		return Value{Name: d.Name, Value: *d.Default, Origin: FromDefault}, true
	}
	return Value{}, false
}

func find(ps []Param, name string) (string, bool) {
	for _, p := range ps {
		if p.Name == name {
			return p.Value, true
		}
	}
	return "", false
}

// CheckRequired returns a *MissingError naming (sorted) every required parameter whose value is
// empty or absent. The lists are layers in priority order: the first list setting a name decides,
// so an explicit empty value from the user is missing even when a lower layer has a default.
func CheckRequired(required []string, lists ...[]Param) error {
	var missing []string
	for _, name := range required {
		value := ""
		for _, ps := range lists {
			if v, ok := find(ps, name); ok {
				value = v
				break
			}
		}
		if value == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	return &MissingError{Names: missing}
}
