package params

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func str(s string) *string { return &s }

func TestResolve(t *testing.T) {
	tests := []struct {
		name     string
		declared []Declared
		layers   Layers
		want     []Value
		missing  []string
	}{{
		// The seed design's example: the user sets only the repository.
		name: "seed example",
		declared: []Declared{
			{Name: "SOURCE_REPO_URL"},
			{Name: "SOURCE_REVISION", Default: str("master")},
			{Name: "BUILD_CONTEXT", Default: str(".")},
		},
		layers: Layers{
			Build:    []Param{{"SOURCE_REPO_URL", "github.com/myorg/myapp"}},
			Template: []Param{{"SOURCE_REVISION", "main"}},
		},
		want: []Value{
			{"SOURCE_REPO_URL", "github.com/myorg/myapp", FromBuild},
			{"SOURCE_REVISION", "main", FromTemplate},
			{"BUILD_CONTEXT", ".", FromDefault},
		},
	}, {
		name:     "build beats step beats template beats default",
		declared: []Declared{{Name: "A", Default: str("d")}, {Name: "B", Default: str("d")}, {Name: "C", Default: str("d")}, {Name: "D", Default: str("d")}},
		layers: Layers{
			Build:    []Param{{"A", "build"}},
			Step:     []Param{{"A", "step"}, {"B", "step"}},
			Template: []Param{{"A", "tmpl"}, {"B", "tmpl"}, {"C", "tmpl"}},
		},
		want: []Value{{"A", "build", FromBuild}, {"B", "step", FromStep}, {"C", "tmpl", FromTemplate}, {"D", "d", FromDefault}},
	}, {
		name:     "first occurrence in a layer wins (explicit parameters before derived ones)",
		declared: []Declared{{Name: "IMAGE"}},
		layers:   Layers{Build: []Param{{"IMAGE", "explicit"}, {"IMAGE", "derived"}}},
		want:     []Value{{"IMAGE", "explicit", FromBuild}},
	}, {
		name:     "an explicit empty value is a value",
		declared: []Declared{{Name: "X", Default: str("d")}},
		layers:   Layers{Build: []Param{{"X", ""}}},
		want:     []Value{{"X", "", FromBuild}},
	}, {
		name:     "undeclared parameters are not passed",
		declared: []Declared{{Name: "A"}},
		layers:   Layers{Build: []Param{{"A", "1"}, {"OTHER", "2"}}, Template: []Param{{"G", "3"}}},
		want:     []Value{{"A", "1", FromBuild}},
	}, {
		name:     "missing parameters are all named, sorted",
		declared: []Declared{{Name: "Z"}, {Name: "A"}, {Name: "B", Default: str("")}},
		missing:  []string{"A", "Z"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve("build", tt.declared, tt.layers)
			if tt.missing != nil {
				var m *MissingError
				require.ErrorAs(t, err, &m)
				assert.Equal(t, tt.missing, m.Names)
				assert.Equal(t, "build", m.Step)
				assert.Contains(t, err.Error(), `step "build" requires parameter(s) A, Z`)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestCheckRequired(t *testing.T) {
	build := []Param{{"SOURCE_REPO_URL", "https://x"}, {"EMPTY", ""}}
	tmpl := []Param{{"REGISTRY", "r"}}
	require.NoError(t, CheckRequired([]string{"SOURCE_REPO_URL", "REGISTRY"}, build, tmpl))
	err := CheckRequired([]string{"SOURCE_REPO_URL", "IMAGE", "EMPTY"}, build, tmpl)
	var m *MissingError
	require.ErrorAs(t, err, &m)
	assert.Equal(t, []string{"EMPTY", "IMAGE"}, m.Names)
	assert.Equal(t, "the template requires parameter(s) EMPTY, IMAGE with no value: set them in spec.pipeline.parameters", err.Error())
}

func BenchmarkResolve(b *testing.B) {
	declared := make([]Declared, 0, 20)
	var build, step, tmpl []Param
	for i := range 20 {
		n := string(rune('A'+i)) + "_PARAM"
		declared = append(declared, Declared{Name: n, Default: str("d")})
		switch i % 4 {
		case 0:
			build = append(build, Param{n, "b"})
		case 1:
			step = append(step, Param{n, "s"})
		case 2:
			tmpl = append(tmpl, Param{n, "t"})
		}
	}
	l := Layers{Build: build, Step: step, Template: tmpl}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Resolve("build", declared, l); err != nil {
			b.Fatal(err)
		}
	}
}
