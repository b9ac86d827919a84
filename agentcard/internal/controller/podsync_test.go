package controller

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kagenti/platform/agentcard/internal/resources"
	"github.com/kagenti/platform/agentcard/internal/signature"
)

// What a verification result repeats from the card (a kid or alg of any size, quoted in messages)
// is cut before it is kept per pod.
func TestBoundedResult(t *testing.T) {
	huge := strings.Repeat("k", 100<<10)
	v := boundedResult(signature.Result{KeyID: huge, Algorithm: huge, SpiffeID: huge, Message: "kid " + huge + " cannot be resolved"})
	assert.LessOrEqual(t, len(v.KeyID), resources.MaxKeyIDBytes+len("…"))
	assert.LessOrEqual(t, len(v.Algorithm), resources.MaxKeyIDBytes+len("…"))
	assert.LessOrEqual(t, len(v.SpiffeID), resources.MaxSpiffeIDBytes+len("…"))
	assert.LessOrEqual(t, len(v.Message), resources.MaxMessageBytes+len("…"))
}
