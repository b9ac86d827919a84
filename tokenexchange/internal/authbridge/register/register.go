// Package register is the client-registration role: it registers the workload as an OAuth client
// with the identity provider, under the name the client name template gives, and writes the client
// ID and secret to the shared volume for the outbound proxy.
package register

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// Client is what is registered.
type Client struct {
	Name string
	// Owner is the owner marker of the workload (OwnerOf): an existing client is touched only
	// when it carries the same one.
	Owner string
	// Description says which workload the client is for.
	Description string
	// TokenExchange enables the RFC 8693 grant on the client.
	TokenExchange bool
}

// Credentials are a registered client's.
type Credentials struct {
	ClientID     string
	ClientSecret string
}

// Provider registers clients with one kind of identity provider. Register is idempotent: a
// client that exists and carries c.Owner is brought to the desired settings and its credentials
// returned; one that carries another owner marker, or none, is left untouched
// (*ClientOwnedElsewhereError).
type Provider interface {
	Register(ctx context.Context, c Client) (Credentials, error)
}

// AdminCredentials are read from the mounted Secret (one file per key), never from a ConfigMap.
type AdminCredentials struct {
	Dir string
}

// Read returns the value of key, "" when the file is absent.
func (a AdminCredentials) Read(key string) (string, error) {
	b, err := os.ReadFile(filepath.Join(a.Dir, key))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// ProviderFor returns the provider the configuration names.
func ProviderFor(c authconfig.Config, client *http.Client, admin AdminCredentials, stateDir string) (Provider, error) {
	switch c.IdP.Provider {
	case authconfig.ProviderKeycloak:
		return &Keycloak{URL: c.IdP.KeycloakURL, Realm: c.IdP.Realm, HTTP: client, Admin: admin}, nil
	case authconfig.ProviderOIDC:
		return &DynamicRegistration{URL: c.IdP.RegistrationURL, HTTP: client, Admin: admin,
			StateFile: filepath.Join(stateDir, authconfig.RegistrationFile)}, nil
	}
	return nil, fmt.Errorf("unknown provider %q", c.IdP.Provider)
}

// Runner keeps the workload registered as its configuration asks.
type Runner struct {
	cfg       *sidecar.Config
	admin     AdminCredentials
	sharedDir string
	http      *http.Client
	log       *zap.Logger
	// Resync re-registers this often even without a change, so that a client deleted at the
	// provider comes back.
	Resync time.Duration
	// newProvider is ProviderFor; tests replace it.
	newProvider func(authconfig.Config) (Provider, error)

	kick chan struct{}
	mu   sync.Mutex
	done string // key of the registration whose credentials are written
	err  error
	// refused is the owner-marker refusal behind err, if it is one.
	refused *ClientOwnedElsewhereError
}

// NewRunner builds the runner.
func NewRunner(cfg *sidecar.Config, admin AdminCredentials, sharedDir string, client *http.Client, log *zap.Logger) *Runner {
	r := &Runner{cfg: cfg, admin: admin, sharedDir: sharedDir, http: client, log: log, Resync: 10 * time.Minute,
		kick: make(chan struct{}, 1)}
	r.newProvider = func(c authconfig.Config) (Provider, error) { return ProviderFor(c, client, admin, sharedDir) }
	cfg.OnChange(func(sidecar.Snapshot) { r.Kick() })
	return r
}

// Kick asks for a registration pass now (after a change of the configuration or the credentials).
func (r *Runner) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// key identifies what a registration depends on: a change of any of these registers again.
func key(c authconfig.Config, admin AdminCredentials) string {
	h := sha256.New()
	_ = json.NewEncoder(h).Encode([]any{c.IdP, c.ClientRegistration, c.Workload})
	for _, f := range []string{"client-id", "client-secret", "username", "password", "realm", "initial-access-token"} {
		v, _ := admin.Read(f)
		fmt.Fprintf(h, "%s=%d:%s\n", f, len(v), v)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Run registers, then follows changes, until ctx ends. Failures are retried with backoff; a
// periodic resync registers again even without a change.
func (r *Runner) Run(ctx context.Context) {
	backoff := time.Second
	timer := time.NewTimer(r.Resync)
	defer timer.Stop()
	force := false
	for {
		err := r.pass(ctx, force)
		wait := r.Resync
		if err != nil {
			wait = backoff
			backoff = min(backoff*2, time.Minute)
		} else {
			backoff = time.Second
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
			force = false
		case <-timer.C:
			force = err == nil // a retry after an error runs anyway
		}
	}
}

// pass registers when the configuration changed since the last success, or always when force.
func (r *Runner) pass(ctx context.Context, force bool) error {
	c := r.cfg.Current().Config
	if !c.ClientRegistration.Enabled || c.ClientRegistration.ClientAuthentication == authconfig.ClientAuthJWTSVID {
		// jwtSVID: kagenti-tokenexchange registers the client; nothing is written here.
		r.set("", nil)
		return nil
	}
	k := key(c, r.admin)
	r.mu.Lock()
	unchanged := r.done == k && r.err == nil
	r.mu.Unlock()
	if unchanged && !force {
		return nil
	}
	p, err := r.newProvider(c)
	if err != nil {
		r.set("", err)
		return err
	}
	client := Client{
		Name:          c.ClientRegistration.ClientName,
		Owner:         OwnerOf(c.Workload),
		Description:   fmt.Sprintf("Kagenti workload %s/%s (%s), registered by kagenti-authbridge", c.Workload.Namespace, c.Workload.Name, c.SpiffeID),
		TokenExchange: c.ClientRegistration.TokenExchangeEnabled,
	}
	creds, err := p.Register(ctx, client)
	if err == nil {
		err = r.write(creds)
	}
	if refused := (*ClientOwnedElsewhereError)(nil); errors.As(err, &refused) {
		// Retried like any failure (with backoff, up to a minute apart), so that a client adopted
		// by setting its owner marker is picked up without a restart; each retry reads only the
		// client's marker.
		r.log.Error("registration refused: the client belongs to another workload; retrying", zap.String("client", client.Name),
			zap.String("owner", refused.Owner), zap.String("provider", c.IdP.Provider), zap.Error(err))
		r.set("", err)
		return err
	}
	if err != nil {
		r.log.Error("registration failed; retrying", zap.String("client", client.Name), zap.String("provider", c.IdP.Provider), zap.Error(err))
		r.set("", err)
		return err
	}
	r.log.Info("registered", zap.String("client", client.Name), zap.String("clientId", creds.ClientID), zap.String("provider", c.IdP.Provider))
	r.set(k, nil)
	return nil
}

func (r *Runner) set(done string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done, r.err, r.refused = done, err, nil
	_ = errors.As(err, &r.refused)
}

// write puts the credentials on the shared volume, each file replaced atomically; the secret goes
// first so that a reader that sees the new ID also finds its secret.
func (r *Runner) write(c Credentials) error {
	if err := sidecar.WriteFileAtomic(r.sharedDir, authconfig.ClientSecretFile, []byte(c.ClientSecret), 0o640); err != nil {
		return err
	}
	return sidecar.WriteFileAtomic(r.sharedDir, authconfig.ClientIDFile, []byte(c.ClientID), 0o640)
}

// Ready lists what the role still waits for: credentials written for the current configuration.
func (r *Runner) Ready() []string {
	c := r.cfg.Current().Config
	if !c.ClientRegistration.Enabled {
		return nil
	}
	if c.ClientRegistration.ClientAuthentication == authconfig.ClientAuthJWTSVID {
		if c.ClientRegistration.ClientID == "" {
			return []string{"waiting for kagenti-tokenexchange to register the client (clientAuthentication jwtSVID; see the TokenExchange's ClientRegistered condition)"}
		}
		return nil
	}
	k := key(c, r.admin)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.refused != nil:
		return []string{"registration refused: " + r.err.Error()}
	case r.err != nil:
		return []string{"registration with the identity provider failed: " + r.err.Error()}
	case r.done != k:
		return []string{"not registered yet for the current configuration"}
	}
	return nil
}

// Refusal reports a registration refused because the client belongs to another workload (the
// status field the controller turns into reason ClientOwnedElsewhere), nil otherwise.
func (r *Runner) Refusal() *sidecar.Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused == nil {
		return nil
	}
	return &sidecar.Refusal{Reason: sidecar.ReasonClientOwnedElsewhere, Message: r.err.Error()}
}
