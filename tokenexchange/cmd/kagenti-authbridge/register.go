package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/register"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

func newRegisterCommand(common *commonFlags) *cobra.Command {
	var credentialsDir, adminAddr string
	cmd := &cobra.Command{
		Use:   "register",
		Short: "client-registration: register the workload with the identity provider and keep it registered",
		Long: `register registers the workload as an OAuth client with the identity provider, under the name
clientNameTemplate gives, and writes the client ID and secret to client-id.txt and client-secret.txt
in --shared-dir (each replaced atomically). It keeps running, registers again when the
configuration or the credentials in --idp-credentials-dir change, and every 10 minutes.

Keycloak: its admin REST API, with the keys client-id/client-secret (a service account with
manage-clients) or username/password of the mounted Secret. Other providers (provider oidc):
RFC 7591 dynamic client registration, with the optional key initial-access-token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := common.logger("register")
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			cfg, err := common.config(log)
			if err != nil {
				return err
			}
			admin := register.AdminCredentials{Dir: credentialsDir}
			r := register.NewRunner(cfg, admin, common.sharedDir, idpClient(), log)
			watchCredentials := func(ctx context.Context) error {
				sidecar.WatchDir(ctx, credentialsDir, common.poll, log, r.Kick)
				return nil
			}
			run := func(ctx context.Context) error { r.Run(ctx); return nil }
			return runRole(cmd.Context(), "register", adminAddr, cfg, common.poll, r.Ready, log, run, watchCredentials)
		},
	}
	cmd.Flags().StringVar(&credentialsDir, "idp-credentials-dir", envOr("KAGENTI_IDP_CREDENTIALS_DIR", authconfig.IdPCredentialsDir),
		"the mounted Secret with the identity provider's registration credentials [$KAGENTI_IDP_CREDENTIALS_DIR]")
	cmd.Flags().StringVar(&adminAddr, "status-address", adminAddress(registerAdminPort), "address of /healthz, /readyz and /status")
	return cmd
}
