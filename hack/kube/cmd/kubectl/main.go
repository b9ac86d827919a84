// Command kubectl is the upstream kubectl (with its built-in kustomize), built from the Go module proxy.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() { os.Exit(cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand())) }
