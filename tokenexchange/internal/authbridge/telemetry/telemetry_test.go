package telemetry

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCallersAreBounded: past MaxCallers distinct (caller, via) pairs, calls are counted under
// caller "other": a stream of tokens naming new clients cannot grow the process.
func TestCallersAreBounded(t *testing.T) {
	m := New()
	for i := range MaxCallers + 50 {
		m.Call(fmt.Sprintf("spiffe://td/ns/a/sa/c%d", i), []string{fmt.Sprintf("spiffe://td/ns/a/sa/c%d", i), "spiffe://td/ns/a/sa/first"}, true)
	}
	m.Call("spiffe://td/ns/a/sa/c0", []string{"spiffe://td/ns/a/sa/c0", "spiffe://td/ns/a/sa/first"}, false)
	assert.Equal(t, float64(50), m.Sum("kagenti_authbridge_calls_total", map[string]string{"caller": "other"}))
	assert.Equal(t, float64(1), m.Sum("kagenti_authbridge_calls_total", map[string]string{"caller": "spiffe://td/ns/a/sa/c0", "via": "spiffe://td/ns/a/sa/first", "result": "denied"}),
		"a pair already kept keeps its own series")
	assert.Equal(t, float64(MaxCallers+51), m.Sum("kagenti_authbridge_calls_total", nil))
}
