package outbound

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// CredentialSource reads the workload's credentials from the shared volume: the client ID and
// secret client-registration writes, or the JWT SVID spiffe-helper writes. Which one the proxy
// presents follows the configuration: the registered client when registration is on, else the
// JWT SVID.
type CredentialSource struct {
	clientID, clientSecret, svid *sidecar.SharedFile
	now                          func() time.Time
}

// NewCredentialSource follows the files in dir (the shared volume).
func NewCredentialSource(dir string) *CredentialSource {
	s := &CredentialSource{now: time.Now}
	s.clientID = sidecar.NewSharedFile(filepath.Join(dir, authconfig.ClientIDFile), nil)
	s.clientSecret = sidecar.NewSharedFile(filepath.Join(dir, authconfig.ClientSecretFile), nil)
	s.svid = sidecar.NewSharedFile(filepath.Join(dir, authconfig.JWTSVIDFile), func(b []byte) error {
		if _, ok := jwtExpiry(string(b)); !ok {
			return errors.New("not a JWT with an expiry")
		}
		return nil
	})
	return s
}

// Refresh re-reads the files.
func (s *CredentialSource) Refresh() {
	s.clientID.Refresh()
	s.clientSecret.Refresh()
	s.svid.Refresh()
}

// Get returns the credentials to present under c, or why there are none yet.
func (s *CredentialSource) Get(c authconfig.Config) (Credentials, error) {
	switch {
	case c.ClientRegistration.Enabled && c.ClientRegistration.ClientAuthentication == authconfig.ClientAuthJWTSVID:
		// kagenti-tokenexchange registered the client, bound to the workload's SPIFFE ID: the JWT
		// SVID is its only credential (RFC 7523 client assertion).
		if c.ClientRegistration.ClientID == "" {
			return Credentials{}, errors.New("no client yet: kagenti-tokenexchange registers it (clientAuthentication jwtSVID) and writes its ID into config.yaml; see the TokenExchange's ClientRegistered condition")
		}
		return s.svidCredentials(c, c.ClientRegistration.ClientID)
	case c.ClientRegistration.Enabled:
		id, err := s.clientID.Get()
		if err != nil {
			return Credentials{}, fmt.Errorf("no client credentials yet (client-registration writes them): %w", err)
		}
		secret, err := s.clientSecret.Get()
		if err != nil {
			return Credentials{}, fmt.Errorf("no client credentials yet (client-registration writes them): %w", err)
		}
		return Credentials{ClientID: string(id), ClientSecret: string(secret)}, nil
	case c.Spiffe.Enabled && c.Spiffe.OutputFormat == authconfig.OutputJWT:
		return s.svidCredentials(c, c.SpiffeID)
	default:
		return Credentials{}, errors.New("token exchange needs credentials: enable clientRegistration, or spiffe with outputFormat jwt")
	}
}

// svidCredentials authenticates as clientID with the current JWT SVID as the client assertion.
func (s *CredentialSource) svidCredentials(c authconfig.Config, clientID string) (Credentials, error) {
	if !c.Spiffe.Enabled {
		return Credentials{}, errors.New("clientAuthentication jwtSVID needs the workload's JWT SVID: label the workload kagenti.io/spiffe=enabled")
	}
	svid, err := s.svid.Get()
	if err != nil {
		return Credentials{}, fmt.Errorf("no JWT SVID yet (spiffe-helper writes it): %w", err)
	}
	if exp, _ := jwtExpiry(string(svid)); !s.now().Before(exp) {
		return Credentials{}, fmt.Errorf("the JWT SVID in %s expired at %s (spiffe-helper renews it; is the SPIRE agent reachable?)",
			s.svid.Path, exp.UTC().Format(time.RFC3339))
	}
	// The SVID authenticates the workload and, where the identity provider chains delegation
	// (outbound.tokenExchange.delegation: chained), is its actor token: the provider names the
	// SPIFFE ID in act. A provider that does not verify actor tokens refuses an exchange that
	// carries one, hence the setting. A client with a secret sends none: its client ID names the
	// actor to the provider that authenticated it.
	creds := Credentials{ClientID: clientID, Assertion: string(svid)}
	if c.Outbound.TokenExchange.Delegation == authconfig.DelegationChained {
		creds.ActorToken = creds.Assertion
	}
	return creds, nil
}
