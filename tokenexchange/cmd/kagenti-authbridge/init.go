package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/intercept"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

func newInitCommand(common *commonFlags) *cobra.Command {
	var (
		intercepting  bool
		dryRun        bool
		helperConf    string
		helperHealth  int32
		fileMode      uint32
		alwaysInbound string
	)
	cmd := &cobra.Command{
		Use:   "init",
		Short: "proxy-init: write spiffe-helper's configuration and install the traffic redirects, then exit",
		Long: `init runs once, as the pod's first init container, and settles what takes effect only at pod start:

  - helper.conf for spiffe-helper (written to --helper-conf when spiffe is enabled), from the same
    merged configuration the other roles run;
  - nftables rules in the pod's network namespace (table inet kagenti, replaced atomically, so a
    restart installs them once): outgoing TCP to the outbound proxy except the proxy's UID,
    loopback and excluded ports; incoming TCP to the inbound proxy except excluded ports and the
    status ports of the sidecars. It needs CAP_NET_ADMIN.

It prints the rules it installed. A config.yaml it cannot use is reported, and the injector's
defaults are applied instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return common.withConfig("init", func(log *zap.Logger, cfg *sidecar.Config) error {
				c := cfg.Current().Config
				out := cmd.OutOrStdout()
				if cfg.Err() != nil {
					fmt.Fprintf(out, "config.yaml rejected, the injector's defaults apply: %v\n", cfg.Err())
				}
				if helperConf != "" && c.Spiffe.Enabled {
					conf := authconfig.RenderHelperConf(c, authconfig.HelperOptions{CertDir: common.sharedDir, FileMode: fileMode, HealthPort: helperHealth})
					if !dryRun {
						if err := sidecar.WriteFileAtomic(filepath.Dir(helperConf), filepath.Base(helperConf), []byte(conf), 0o644); err != nil {
							return fmt.Errorf("writing %s: %w", helperConf, err)
						}
					}
					fmt.Fprintf(out, "wrote %s:\n%s", helperConf, conf)
				}
				if !intercepting {
					fmt.Fprintln(out, "traffic interception skipped (--intercept=false)")
					return nil
				}
				always, err := parsePorts(alwaysInbound)
				if err != nil {
					return fmt.Errorf("--always-exclude-inbound: %w", err)
				}
				rules := intercept.RulesFor(c, always)
				if err := rules.Validate(); err != nil {
					return err
				}
				if dryRun {
					fmt.Fprintf(out, "would install:\n%s", rules.Describe())
					return nil
				}
				if err := intercept.Install(rules); err != nil {
					return err
				}
				installed, err := intercept.Installed()
				if err != nil {
					return fmt.Errorf("reading the rules back: %w", err)
				}
				fmt.Fprintf(out, "installed (chains and rule counts read back from the kernel: %v):\n%s", installed, rules.Describe())
				log.Info("traffic interception installed", zap.Any("chains", installed), zap.String("contentHash", cfg.Current().ContentHash))
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&intercepting, "intercept", true, "install the traffic redirects (false: only write helper.conf, e.g. when neither proxy is injected)")
	f.BoolVar(&dryRun, "dry-run", false, "print what would be written and installed, change nothing")
	f.StringVar(&helperConf, "helper-conf", filepath.Join(authconfig.SharedDir, authconfig.HelperConfFile), "where to write spiffe-helper's configuration; empty: do not write it")
	f.Int32Var(&helperHealth, "spiffe-helper-health-port", spiffeHelperHealthPort, "port of spiffe-helper's /live and /ready endpoints; 0: none")
	f.Uint32Var(&fileMode, "svid-file-mode", authconfig.DefaultHelperFileMode, "file mode of the JWT SVID (readable by the identity sidecars' shared group)")
	f.StringVar(&alwaysInbound, "always-exclude-inbound", joinPorts(registerAdminPort, inboundAdminPort, outboundAdminPort, spiffeHelperHealthPort, sidecarStatusPort),
		"inbound ports never redirected: the sidecars' status and health ports")
	return cmd
}

func parsePorts(s string) ([]uint16, error) {
	var out []uint16
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.ParseUint(f, 10, 16)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("%q is not a port", f)
		}
		out = append(out, uint16(p))
	}
	return out, nil
}

func joinPorts(ports ...int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}
