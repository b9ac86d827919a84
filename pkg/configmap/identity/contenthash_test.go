package identity

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The hash is recorded on ConfigMaps and reported by running pods of older releases: its value
// for a given content must not change.
func TestContentHashIsStable(t *testing.T) {
	assert.Equal(t, "67a1662d9acaf1bca1e34e261ef8fef6", ContentHash(map[string]string{"config.yaml": "inbound:\n  port: 9090\n", "other": "x"}, nil))
	assert.Equal(t, ContentHash(map[string]string{"k": "v"}, map[string][]byte{}), ContentHash(map[string]string{"k": "v"}, nil))
	assert.NotEqual(t, ContentHash(map[string]string{"k": "v"}, nil), ContentHash(nil, map[string][]byte{"k": []byte("v")}))
	assert.NotEqual(t, ContentHash(map[string]string{"ab": "c"}, nil), ContentHash(map[string]string{"a": "bc"}, nil))
}
