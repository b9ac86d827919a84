package cmd

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/cli/internal/check"
)

func newCheck(o *options) *cobra.Command {
	opts := check.Options{}
	var output string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check a cluster's Kagenti installation (pre-flight and health)",
		Long: `Check prints one line per check, ✓ or ✗ with the fix, and exits non-zero when one fails:

  - the CRD of each pillar: installed, established, serving v1alpha1;
  - each pillar's controller: its Deployment ready (where it is deployed in the cluster), and that it
    reconciles: a probe object targeting a workload that does not exist, in a scratch namespace, must
    get a status (this also finds controllers that run outside the cluster);
  - each Kagenti webhook's certificate: served at its URL, or stored in the Secret its Deployment
    mounts, valid and signed by the webhook configuration's caBundle;
  - the injector's webhook reachable: a server dry run of a Deployment labelled for injection, in the
    scratch namespace, must come back injected;
  - when identity is used (a workload labelled kagenti.io/spiffe=enabled, or --identity=true): the
    SPIRE CSI driver and the trust bundle ConfigMap;
  - the IdP URL of the injector's configuration: a cluster Service with ready endpoints, or a DNS name
    that resolves.

The scratch namespace (kagenti-check-*) is deleted at the end; --read-only skips every check that
writes.`,
		Example: `  kagenti check
  kagenti check --pillars injector,tokenexchange --kagenti-namespace platform
  kagenti check --read-only -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Validate(); err != nil {
				return err
			}
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("-o %s: json or yaml (or nothing, for text)", output)
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			results := check.Run(cmd.Context(), c, opts)
			switch output {
			case "json":
				raw, err := json.MarshalIndent(results, "", "  ")
				if err != nil {
					return err
				}
				fmt.Fprintln(o.streams.Out, string(raw))
			case "yaml":
				raw, err := yaml.Marshal(results)
				if err != nil {
					return err
				}
				_, _ = o.streams.Out.Write(raw)
			default:
				if err := check.Write(o.streams.Out, results); err != nil {
					return err
				}
			}
			if check.Failed(results) > 0 {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Namespace, "kagenti-namespace", "kagenti-system", "the namespace Kagenti is installed in")
	f.StringSliceVar(&opts.Pillars, "pillars", check.AllPillars, "the pillars that should be installed")
	f.DurationVar(&opts.Timeout, "timeout", 20*time.Second, "how long the controllers get to reconcile the probes")
	f.BoolVar(&opts.ReadOnly, "read-only", false, "write nothing: skip the webhook dry run and the reconcile probes")
	f.StringVar(&opts.Identity, "identity", "auto", "check SPIRE's CSI driver and trust bundle: auto (when a workload is labelled kagenti.io/spiffe=enabled), true or false")
	f.StringVar(&opts.TrustBundle, "trust-bundle", "", "the trust bundle ConfigMap (namespace/name); default: agentcard's --trust-bundle-configmap, else kagenti-system/spire-bundle")
	f.StringVarP(&output, "output", "o", "", "json or yaml (default: text)")
	_ = cmd.RegisterFlagCompletionFunc("pillars", cobra.FixedCompletions(check.AllPillars, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("identity", cobra.FixedCompletions([]string{"auto", "true", "false"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
