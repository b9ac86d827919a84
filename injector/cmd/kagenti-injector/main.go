// Command kagenti-injector runs the mutating admission webhook that injects the identity
// infrastructure into labelled workloads.
package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kagenti/platform/injector/internal/certs"
	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
	"github.com/kagenti/platform/pkg/duck/kit/command"
)

func main() { command.Main(options()) }

func options() command.Options {
	var opts injectorwebhook.Options
	return command.Options{
		Name:            "kagenti-injector",
		Short:           "Runs the Kagenti injector: the mutating webhook that injects the identity infrastructure",
		WebhookOnly:     true,
		LeaderElectHelp: "accepted for uniformity with the other binaries; the webhook serves on every replica and needs no leader",
		NamespacesHelp:  "comma-separated namespaces the manager's cache may watch; empty watches all (the webhook itself reads nothing)",
		Webhook: &command.WebhookFlags{ConfigKind: "MutatingWebhookConfiguration", ConfigName: "kagenti-injector",
			CertSecret: "kagenti-injector-cert", ServiceName: "kagenti-injector", NewServer: func(o webhook.Options) webhook.Server { return injectorwebhook.NewServer(o) },
			NamespaceHelp: "the injector's own namespace: holds the certificate Secret and is never injected into"},
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&opts.ConfigPath, "config", "/etc/kagenti-injector/config.yaml", "path of config.yaml (hot-reloaded); a missing file means the built-in defaults")
		},
		Commands: []*cobra.Command{newGenCertsCommand()},
		// Namespaces are read for their Pod Security labels only.
		Cache: func([]string) cache.Options {
			return cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Namespace{}: {Transform: injectorwebhook.TrimNamespace}}}
		},
		Setup: func(mgr manager.Manager, rt command.Runtime) error {
			c := rt.Cert
			opts.CertDir, opts.RotatorCertDir, opts.CertSecret, opts.WebhookConfig, opts.ServiceName, opts.Namespace =
				c.CertDir, c.RotatorCertDir, c.CertSecret, c.WebhookConfig, c.ServiceName, c.Namespace
			return injectorwebhook.Setup(mgr, opts, ctrl.Log.WithName("injector"))
		},
	}
}

func newGenCertsCommand() *cobra.Command {
	var (
		outDir   string
		hosts    []string
		validity time.Duration
	)
	cmd := &cobra.Command{
		Use:   "gen-certs",
		Short: "Writes a self-signed CA (ca.crt) and a serving certificate (tls.crt, tls.key) for --cert-dir",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := certs.Generate(hosts, validity)
			if err != nil {
				return err
			}
			if err := b.Write(outDir); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s/{%s,%s,%s} for %s\n", outDir, certs.CAFile, certs.CertFile, certs.KeyFile, strings.Join(hosts, ","))
			return nil
		},
	}
	cmd.Flags().StringVar(&outDir, "out-dir", "", "directory to write the files to (created if missing)")
	cmd.Flags().StringSliceVar(&hosts, "host", []string{"127.0.0.1"}, "IP addresses or DNS names of the certificate (repeatable)")
	cmd.Flags().DurationVar(&validity, "validity", 365*24*time.Hour, "how long the certificates are valid")
	_ = cmd.MarkFlagRequired("out-dir")
	return cmd
}

// Every binary authenticates and authorizes the scrapers of its metrics endpoint with the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
