// Command kubectl-kagenti is the kubectl plugin of kagenti (`kubectl kagenti ...`): the same command line.
package main

import (
	"os"

	"github.com/kagenti/platform/cli/internal/cmd"
)

func main() { os.Exit(cmd.Main()) }
