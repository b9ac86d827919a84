// Command kagenti-authbridge is the data plane of the tokenexchange pillar: one binary whose
// subcommands are the identity containers the injector adds to a workload's pods.
//
//	init      proxy-init: writes spiffe-helper's configuration, installs the traffic redirects
//	register  client-registration: registers the workload with the identity provider
//	inbound   auth-proxy: validates incoming bearer tokens in front of the agent
//	outbound  envoy-proxy: exchanges tokens on outgoing requests (RFC 8693)
//	sidecar   the long-running roles of one container (register, inbound, outbound) in one process
//
// Every role reads the identity defaults from its environment or the injector's identity volume
// and config.yaml of the ConfigMap {workload}-token-exchange projected beside them (set by the
// tokenexchange controller), which overrides them and is followed without a restart. docs/identity.md describes
// each container.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time (-ldflags "-X main.version=…").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kagenti-authbridge:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	var common commonFlags
	root := &cobra.Command{
		Use:           "kagenti-authbridge",
		Short:         "The identity data plane of Kagenti workloads (proxy-init, client-registration, auth-proxy, outbound proxy)",
		Long:          "kagenti-authbridge runs one identity role per container of a Kagenti workload's pod.\n\nIdentity defaults come from the environment the injector sets (" + envSummary() + ");\nconfig.yaml in --config-dir overrides them and is reloaded on change.",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	common.register(root)
	root.AddCommand(newInitCommand(&common), newRegisterCommand(&common), newInboundCommand(&common), newOutboundCommand(&common),
		newSidecarCommand(&common))
	return root
}
