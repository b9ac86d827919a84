package command

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSetGCPercent: the binary's garbage collector target is the one it asks for unless GOGC says
// otherwise.
func TestSetGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	assert.Equal(t, "default 50", SetGCPercent(50, func(string) string { return "" }))
	assert.Equal(t, 50, debug.SetGCPercent(100), "no GOGC: the binary's target")

	got := SetGCPercent(50, func(k string) string {
		if k == "GOGC" {
			return "100"
		}
		return ""
	})
	assert.Equal(t, "GOGC=100 set in the environment", got)
	assert.Equal(t, 100, debug.SetGCPercent(100), "GOGC from the environment is kept")
}
