package cmd

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/kagenti/platform/cli/internal/uninstall"
)

func newUninstall(o *options) *cobra.Command {
	opts := uninstall.Options{}
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove Kagenti without disturbing the workloads",
		Long: `Uninstall removes Kagenti in an order that never disturbs a running workload:

  1. (--uninject) label every injected workload kagenti.io/inject=disabled while the webhook is
     still installed: the injector removes exactly what it injected and the user's pod template
     is restored; the pods roll once;
  2. remove the webhook registrations, so that no create or update is refused from here on;
  3. stop the controllers that create objects (all but netpol);
  4. delete the pillar CRs; the ConfigMaps they wrote stay (unless --uninject), so injected sidecars
     keep their configuration;
  5. delete the pillar CRDs;
  6. remove netpol's NetworkPolicies, restrictive ones first, and only then
  7. stop netpol, so that no traffic stays cut off;
  8. delete the rest of the installation (labelled app.kubernetes.io/part-of=kagenti: RBAC,
     Services, Secrets, ConfigMaps, and the namespace when it is labelled so).

Without --uninject no pod is deleted or restarted: injected pods keep running with their sidecars.
--dry-run lists every object each step would change.`,
		Example: `  # See what would change
  kagenti uninstall --dry-run

  # Remove Kagenti and the injected sidecars (their pods roll once)
  kagenti uninstall --uninject`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.clients()
			if err != nil {
				return err
			}
			opts.Out = o.streams.Out
			return uninstall.Run(cmd.Context(), c, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Namespace, "kagenti-namespace", "kagenti-system", "the namespace Kagenti is installed in")
	f.BoolVar(&opts.DryRun, "dry-run", false, "list what would change, change nothing")
	f.BoolVar(&opts.Uninject, "uninject", false, "strip the injected components from every injected workload first (rolls their pods once)")
	f.DurationVar(&opts.Timeout, "timeout", 3*time.Minute, "how long each wait (rollout, deletion) may take")
	return cmd
}
