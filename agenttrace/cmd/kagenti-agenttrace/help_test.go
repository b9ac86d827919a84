package main

import (
	"testing"

	"github.com/kagenti/platform/pkg/duck/kit/command/commandtest"
)

// TestHelpUnchanged: -h is testdata/help.txt, the output of the binary as it was before its wiring
// moved into pkg/duck/kit/command (issue 30), updated only with a deliberate flag change.
func TestHelpUnchanged(t *testing.T) { commandtest.HelpUnchanged(t, options(), "testdata/help.txt") }
