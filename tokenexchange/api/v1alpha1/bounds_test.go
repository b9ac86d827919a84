package v1alpha1

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestSpecFieldsAreBounded fails on a string without maxLength (or enum), a list without maxItems
// or a map without maxProperties in the generated CRD's spec: the API server would store anything
// up to its request limit, the controller would then fail to write what it renders from it, and
// CEL rules over unbounded fields may exceed the API server's cost budget.
func TestSpecFieldsAreBounded(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "crds", "tokenexchange", "kagenti.io_tokenexchanges.yaml"))
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.Unmarshal(data, &crd))
	for _, v := range crd.Spec.Versions {
		checkBounded(t, "spec", v.Schema.OpenAPIV3Schema.Properties["spec"])
	}
}

func checkBounded(t *testing.T, path string, s apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	switch s.Type {
	case "string":
		if s.MaxLength == nil && len(s.Enum) == 0 {
			t.Errorf("%s: string without maxLength", path)
		}
	case "array":
		if s.MaxItems == nil {
			t.Errorf("%s: list without maxItems", path)
		}
		if s.Items != nil && s.Items.Schema != nil {
			checkBounded(t, path+"[]", *s.Items.Schema)
		}
	case "object":
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			if s.MaxProperties == nil {
				t.Errorf("%s: map without maxProperties", path)
			}
			checkBounded(t, path+"{}", *s.AdditionalProperties.Schema)
		}
		for name, p := range s.Properties {
			checkBounded(t, path+"."+name, p)
		}
	}
}
