package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestGCPercent: the binary's garbage collector target is defaultGCPercent unless GOGC says
// otherwise.
func TestGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	setGCPercent(func(string) string { return "" })
	assert.Equal(t, defaultGCPercent, debug.SetGCPercent(100), "no GOGC: the default target")

	setGCPercent(func(k string) string {
		if k == "GOGC" {
			return "100"
		}
		return ""
	})
	assert.Equal(t, 100, debug.SetGCPercent(100), "GOGC from the environment overridden")
}
