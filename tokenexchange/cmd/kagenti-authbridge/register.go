package main

import (
	"context"
	"net/http"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/register"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

const registerLong = `register registers the workload as an OAuth client with the identity provider, under the name
clientNameTemplate gives, and writes the client ID and secret to client-id.txt and client-secret.txt
in --shared-dir (each replaced atomically). It keeps running, registers again when the
configuration or the credentials in --idp-credentials-dir change, and every 10 minutes.

Keycloak: its admin REST API, with the keys client-id/client-secret (a service account with
manage-clients) or username/password of the mounted Secret. Other providers (provider oidc):
RFC 7591 dynamic client registration, with the optional key initial-access-token.`

// registerOptions are the register role's own flags.
type registerOptions struct {
	credentialsDir string
	statusAddr     string
}

func (o *registerOptions) addFlags(f *pflag.FlagSet, statusFlag string) {
	f.StringVar(&o.credentialsDir, "idp-credentials-dir", envOr("KAGENTI_IDP_CREDENTIALS_DIR", authconfig.IdPCredentialsDir),
		"the mounted Secret with the identity provider's registration credentials [$KAGENTI_IDP_CREDENTIALS_DIR]")
	f.StringVar(&o.statusAddr, statusFlag, adminAddress(registerAdminPort), "address of the register role's /healthz, /readyz and /status")
}

// prepare builds the register role on cfg.
func (o *registerOptions) prepare(common *commonFlags, cfg *sidecar.Config, client *http.Client, log *zap.Logger) (*role, error) {
	admin := register.AdminCredentials{Dir: o.credentialsDir}
	r := register.NewRunner(cfg, admin, common.sharedDir, client, log)
	watchCredentials := func(ctx context.Context) error {
		sidecar.WatchDir(ctx, o.credentialsDir, common.poll, log, r.Kick)
		return nil
	}
	run := func(ctx context.Context) error { r.Run(ctx); return nil }
	return &role{name: "register", statusAddr: o.statusAddr, readiness: r.Ready, refusal: r.Refusal, tasks: []func(context.Context) error{run, watchCredentials}}, nil
}

func newRegisterCommand(common *commonFlags) *cobra.Command {
	return newRoleCommand(common, "register", "client-registration: register the workload with the identity provider and keep it registered", registerLong, &registerOptions{})
}
