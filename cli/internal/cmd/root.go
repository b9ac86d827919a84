// Package cmd holds the kagenti command line: one cobra command per file, wiring only; the work is
// done in the internal packages (migrate, apply, describe, check, uninstall).
package cmd

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kagenti/platform/cli/internal/kube"
)

// Version is set at build time (-ldflags "-X github.com/kagenti/platform/cli/internal/cmd.Version=v0.1.0").
var Version = "dev"

// Name returns how the binary is invoked: "kubectl kagenti" for the kubectl plugin
// (kubectl-kagenti), else "kagenti".
func Name(argv0 string) string {
	base := filepath.Base(argv0)
	if strings.HasPrefix(base, "kubectl-") {
		return "kubectl " + strings.ReplaceAll(strings.TrimPrefix(base, "kubectl-"), "_", "-")
	}
	return "kagenti"
}

// Main runs the command line and returns the process exit code.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	root := NewRoot(Name(os.Args[0]), streams)
	if err := root.ExecuteContext(ctx); err != nil {
		var exit *ExitError
		if asExit(err, &exit) {
			if exit.Message != "" {
				fmt.Fprintln(streams.ErrOut, exit.Message)
			}
			return exit.Code
		}
		fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
		return 1
	}
	return 0
}

// ExitError ends the command with a code after it printed its own output (check's ✗ lines).
type ExitError struct {
	Code    int
	Message string
}

func (e *ExitError) Error() string { return e.Message }

func asExit(err error, target **ExitError) bool {
	e, ok := err.(*ExitError)
	if ok {
		*target = e
	}
	return ok
}

// options are what every command shares.
type options struct {
	name    string
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
}

func (o *options) clients() (*kube.Clients, error) { return kube.New(o.flags) }

// namespace is -n, else the kubeconfig context's namespace, else "default"; explicit says whether
// -n was given.
func (o *options) namespace() (ns string, explicit bool, err error) {
	if o.flags.Namespace != nil && *o.flags.Namespace != "" {
		return *o.flags.Namespace, true, nil // no kubeconfig needed (migrate -f)
	}
	return o.flags.ToRawKubeConfigLoader().Namespace()
}

// NewRoot builds the command tree; name is how the user invoked it (kagenti or kubectl kagenti).
func NewRoot(name string, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{name: name, flags: genericclioptions.NewConfigFlags(true), streams: streams}
	root := &cobra.Command{
		Use: "kagenti",
		// Usage lines say "kubectl kagenti" when run as the kubectl plugin.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: name},
		Short:       "Migrate to, inspect, check and remove Kagenti",
		Long: `kagenti works with the Kagenti platform in a cluster: it migrates legacy Agent objects to plain
workloads plus pillar CRs, describes what Kagenti did to a workload, checks an installation, and
removes Kagenti without disturbing the workloads.

It reads the cluster like kubectl does: --kubeconfig, --context, -n/--namespace.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(newMigrate(o), newDescribe(o), newCheck(o), newUninstall(o), newCompletion(o))
	for _, c := range root.Commands() {
		c.Example = strings.ReplaceAll(c.Example, "kagenti ", name+" ")
	}
	return root
}

func newCompletion(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print the shell completion script",
		Long: `Print the completion script for a shell. For example, in bash:

  source <(kagenti completion bash)`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"bash", "zsh", "fish", "powershell"},
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(o.streams.Out, true)
			case "zsh":
				return root.GenZshCompletion(o.streams.Out)
			case "fish":
				return root.GenFishCompletion(o.streams.Out, true)
			case "powershell":
				return root.GenPowerShellCompletionWithDesc(o.streams.Out)
			}
			return fmt.Errorf("unknown shell %q: bash, zsh, fish or powershell", args[0])
		},
	}
}
