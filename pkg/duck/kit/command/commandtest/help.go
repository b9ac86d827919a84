// Package commandtest holds the test every controller binary runs on its command line: that its
// -h output is the one recorded in testdata/help.txt.
package commandtest

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/kagenti/platform/pkg/duck/kit/command"
)

// HelpUnchanged holds the binary's -h output to golden (testdata/help.txt): every flag's name,
// default and help stays what the manifests, helm charts and docs pass and describe. The go test
// flags (--test.*) registered on the process's flag set are left out, and runs of blanks folded (the
// help's column width follows the longest flag).
func HelpUnchanged(t *testing.T, o command.Options, golden string) {
	t.Helper()
	var out bytes.Buffer
	cmd := command.NewCommand(o)
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"-h"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.SplitAfter(out.String(), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--test.") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	var wantLines []string
	for _, l := range strings.SplitAfter(string(want), "\n") {
		wantLines = append(wantLines, strings.Join(strings.Fields(l), " "))
	}
	if got := strings.Join(lines, "\n"); got != strings.Join(wantLines, "\n") {
		t.Errorf("-h changed:\n--- got\n%s\n--- want\n%s", got, want)
	}
}
