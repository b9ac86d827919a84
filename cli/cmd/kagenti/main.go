// Command kagenti migrates to, describes, checks and removes Kagenti. Installed as kubectl-kagenti
// it is the kubectl plugin `kubectl kagenti`.
package main

import (
	"os"

	"github.com/kagenti/platform/cli/internal/cmd"
)

func main() { os.Exit(cmd.Main()) }
