package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBuiltImage(t *testing.T) {
	const d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct{ url, digest, want, err string }{
		{"registry:5000/kagenti/agent:latest", d, "registry:5000/kagenti/agent@" + d, ""},
		{"registry:5000/kagenti/agent", d, "registry:5000/kagenti/agent@" + d, ""},
		{"quay.io/a/b:v1@sha256:ffff", d, "quay.io/a/b@" + d, ""},
		{"agent:1.0", d, "agent@" + d, ""},
		{" quay.io/a/b:v1\n", d, "", ""}, // trimmed by the caller; see runResult
		{"quay.io/a/b:v1", "", "", "its results lack IMAGE_URL or IMAGE_DIGEST"},
		{"", d, "", "its results lack IMAGE_URL or IMAGE_DIGEST"},
		{"quay.io/a/b:v1", "sha256:XYZ", "", `its IMAGE_DIGEST result "sha256:XYZ" is not sha256:<64 hex>`},
	}
	for _, tt := range tests {
		if tt.want == "" && tt.err == "" {
			continue
		}
		got, err := BuiltImage(tt.url, tt.digest)
		if tt.err != "" {
			assert.EqualError(t, err, tt.err, tt.url)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tt.want, got)
	}
}

func TestImagePatchTouchesOnlyTheImage(t *testing.T) {
	p, err := imagePatch("/spec/template/spec/containers/1", "agent", "r/a@sha256:1")
	require.NoError(t, err)
	assert.JSONEq(t, `[{"op":"test","path":"/spec/template/spec/containers/1/name","value":"agent"},
		{"op":"replace","path":"/spec/template/spec/containers/1/image","value":"r/a@sha256:1"}]`, string(p))
}
