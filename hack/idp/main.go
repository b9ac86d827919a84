// Command kagenti-dev-idp is an OpenID provider for tests and the local cluster: client
// credentials, RFC 8693 token exchange, JWKS and discovery (zitadel/oidc's op), RFC 7591 dynamic
// client registration, and JWT SVIDs as client assertions. State lives in memory; the signing key
// is generated at start. Never use it for anything but development.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/zitadel/oidc/v3/pkg/op"
)

type clientFlags []string

func (c *clientFlags) String() string     { return strings.Join(*c, " ") }
func (c *clientFlags) Set(v string) error { *c = append(*c, v); return nil }

func main() {
	var (
		addr, issuer, bundle, trustDomain, initialToken string
		lifetime                                        time.Duration
		requireAudience                                 bool
		clients, mayAct, registrars                     clientFlags
	)
	flag.StringVar(&addr, "addr", "127.0.0.1:9080", "listen address (loopback: this is a development tool)")
	flag.StringVar(&issuer, "issuer", "", "issuer URL (default http://<addr>)")
	flag.Var(&clients, "client", "a client, id:secret[:audience,audience…] (repeatable); the audiences of its client-credentials tokens, default its ID")
	flag.StringVar(&bundle, "spiffe-bundle", "", "SPIFFE trust bundle (spire-server bundle show -format spiffe) to accept JWT SVIDs as client assertions")
	flag.StringVar(&trustDomain, "spiffe-trust-domain", "", "trust domain of --spiffe-bundle")
	flag.StringVar(&initialToken, "initial-access-token", "", "require this bearer token for RFC 7591 registration (default: open registration)")
	flag.DurationVar(&lifetime, "token-lifetime", 5*time.Minute, "lifetime of issued access tokens")
	flag.BoolVar(&requireAudience, "require-client-in-audience", true, "token exchange requires the requesting client among the subject token's audiences (as Keycloak's standard token exchange)")
	flag.Var(&mayAct, "may-act", "client=actor (repeatable): the client's client-credentials tokens carry may_act {sub: actor} (RFC 8693 §4.4), and only that actor may exchange them")
	flag.Var(&registrars, "registrar", "a SPIFFE ID allowed to register clients (repeatable): RFC 7591 registration then needs a JWT SVID of one of them as Bearer (needs --spiffe-bundle), instead of --initial-access-token")
	flag.Parse()
	if err := run(addr, issuer, bundle, trustDomain, initialToken, lifetime, requireAudience, clients, mayAct, registrars); err != nil {
		log.Fatal(err)
	}
}

func run(addr, issuer, bundle, trustDomain, initialToken string, lifetime time.Duration, requireAudience bool, clients, mayAct, registrars []string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if issuer == "" {
		issuer = "http://" + ln.Addr().String()
	}
	s, err := newStorage(lifetime, requireAudience)
	if err != nil {
		return err
	}
	for _, c := range clients {
		parts := strings.SplitN(c, ":", 3)
		if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
			return fmt.Errorf("--client %q: want id:secret[:audiences]", c)
		}
		cl := &client{id: parts[0], secret: parts[1], name: parts[0], grants: allGrants}
		if len(parts) == 3 {
			cl.audience = strings.Split(parts[2], ",")
		}
		s.addClient(cl)
	}
	for _, m := range mayAct {
		id, actor, ok := strings.Cut(m, "=")
		c, err := s.client(id)
		if !ok || actor == "" || err != nil || strings.HasPrefix(id, "spiffe://") {
			return fmt.Errorf("--may-act %q: want client=actor, client one of the --client ones", m)
		}
		c.mayAct = actor
	}
	handler, err := newHandler(issuer, s, bundle, trustDomain, initialToken, registrars)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	log.Printf("kagenti-dev-idp: issuer %s, token %s/oauth/token, JWKS %s/keys, registration %s/register", issuer, issuer, issuer, issuer)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newHandler serves the provider for issuer from s: discovery, token, JWKS, registration, and,
// with a SPIFFE bundle, JWT SVIDs as client assertions and as actor tokens.
func newHandler(issuer string, s *storage, bundle, trustDomain, initialToken string, registrars []string) (http.Handler, error) {
	key := sha256.Sum256([]byte(s.svidSecret)) // access tokens are JWTs; the AES key only guards opaque ones
	provider, err := op.NewOpenIDProvider(issuer, &op.Config{CryptoKey: key}, s, op.WithAllowInsecure())
	if err != nil {
		return nil, err
	}
	var handler http.Handler = provider
	var verifySVID func(string) (string, error)
	if bundle != "" {
		td, err := spiffeid.TrustDomainFromString(trustDomain)
		if err != nil {
			return nil, fmt.Errorf("--spiffe-trust-domain: %w", err)
		}
		tokenURL := issuer + provider.TokenEndpoint().Relative()
		a := &svidAuthenticator{bundleFile: bundle, trustDomain: td, audiences: []string{issuer, tokenURL}, secret: s.svidSecret, s: s}
		verifySVID = a.verify
		s.verifyActor = a.verify
		handler = a.wrap(provider.TokenEndpoint().Relative(), handler)
	}
	mux := http.NewServeMux()
	reg := &registrationHandler{s: s, issuer: issuer, initialToken: initialToken, registrars: registrars, verifySVID: verifySVID}
	mux.Handle("/register", reg)
	mux.Handle("/register/", reg)
	mux.Handle("/", handler)
	return mux, nil
}
