package controller_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/jwtsvid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/pkg/configmap/identity"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/outbound"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
	"github.com/kagenti/platform/tokenexchange/internal/resources"
)

// registrarID is the suite controller's SPIFFE ID (the kagenti-tokenexchange service account).
const registrarID = "spiffe://cluster.local/ns/kagenti-system/sa/kagenti-tokenexchange"

// testSVIDs plays the SPIRE agent's Workload API for the suite's controller and for the
// workloads: JWT SVIDs signed by a JWT authority of the trust domain's bundle (bundlePath, the
// SPIFFE format the dev IdP reads).
type testSVIDs struct {
	key        *ecdsa.PrivateKey
	bundlePath string

	mu  sync.Mutex
	id  string // the controller's SPIFFE ID
	err error  // what FetchJWTSVID fails with, when set
}

func newTestSVIDs(dir string) (*testSVIDs, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	b := spiffebundle.New(spiffeid.RequireTrustDomainFromString("cluster.local"))
	if err := b.AddJWTAuthority("test-authority", key.Public()); err != nil {
		return nil, err
	}
	raw, err := b.Marshal()
	if err != nil {
		return nil, err
	}
	s := &testSVIDs{key: key, bundlePath: filepath.Join(dir, "bundle.spiffe"), id: registrarID}
	return s, os.WriteFile(s.bundlePath, raw, 0o600)
}

// FetchJWTSVID is workloadapi.Client's, for the controller.
func (s *testSVIDs) FetchJWTSVID(_ context.Context, p jwtsvid.Params) (*jwtsvid.SVID, error) {
	s.mu.Lock()
	id, err := s.id, s.err
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return jwtsvid.ParseInsecure(s.mint(id, p.Audience), []string{p.Audience})
}

func (s *testSVIDs) set(id string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.id, s.err = id, err
}

// mint signs a JWT SVID of id for audience.
func (s *testSVIDs) mint(id, audience string) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: s.key, KeyID: "test-authority"}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		panic(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{Subject: id, Audience: jwt.Audience{audience},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute))}).Serialize()
	if err != nil {
		panic(err)
	}
	return tok
}

// devIdP runs kagenti-dev-idp (bin/, make tools) on a loopback port, with the suite's bundle and
// registrars allowed to register; it returns the issuer and the IdP's log so far.
func devIdP(t *testing.T, args ...string) (string, func() string) {
	t.Helper()
	bin := filepath.Join(repoRoot(), "bin", "kagenti-dev-idp")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing: build it with make tools (hack/tools.sh identity; make unit does)", bin)
	}
	cmd := exec.Command(bin, append([]string{"--addr", "127.0.0.1:0", "--spiffe-bundle", suiteSVIDs.bundlePath,
		"--spiffe-trust-domain", "cluster.local"}, args...)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var mu sync.Mutex
	var log strings.Builder
	issuer := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := regexp.MustCompile(`issuer (http://\S+),`).FindStringSubmatch(sc.Text()); m != nil {
				select {
				case issuer <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case u := <-issuer:
		return u, func() string { mu.Lock(); defer mu.Unlock(); return log.String() }
	case <-time.After(30 * time.Second):
		t.Fatal("kagenti-dev-idp did not start")
		return "", nil
	}
}

func jwtSVIDExchange(ns, name, target, issuer string) *v1alpha1.TokenExchange {
	te := tokenExchange(ns, name, target)
	te.Spec.ClientRegistration = &v1alpha1.ClientRegistrationSpec{Provider: v1alpha1.ProviderOIDC, ClientAuthentication: v1alpha1.ClientAuthJWTSVID,
		OIDC: &v1alpha1.OIDCSpec{Issuer: issuer, TokenURL: issuer + "/oauth/token", JWKSURL: issuer + "/keys", RegistrationURL: issuer + "/register"}}
	return te
}

// clientAuthentication jwtSVID, end to end on a real API server and a real identity provider:
// kagenti-tokenexchange registers the workload's client with its own JWT SVID (the dev IdP
// verifies it against the trust bundle and allows only this registrar), bound to the workload's
// SPIFFE ID; the client ID (and the provider as the SVID's audience) reaches config.yaml; no
// Secret exists; the client authenticates with the workload's JWT SVID through the outbound
// proxy's exchanger, and with nothing else. The registration is made once: later reconciles and
// a changed unrelated setting reuse it.
func TestClientRegisteredWithTheControllersSVIDHasNoSecret(t *testing.T) {
	ctx := context.Background()
	issuer, idpLog := devIdP(t, "--registrar", registrarID, "--client", "user:user-secret", "--require-client-in-audience=false")
	ns := namespace(t)
	d := deployment(ns, "caller", 1, true)
	d.Spec.Template.Spec.ServiceAccountName = "caller"
	must(t, k8s.Create(ctx, d))
	must(t, k8s.Create(ctx, jwtSVIDExchange(ns, "caller", "caller", issuer)))

	te := waitCondition(t, ns, "caller", v1alpha1.ConditionClientRegistered, metav1.ConditionTrue, v1alpha1.ReasonRegistered)
	reg := te.Status.ClientRegistration
	require.NotNil(t, reg)
	workloadID := "spiffe://cluster.local/ns/" + ns + "/sa/caller"
	assert.Equal(t, workloadID, reg.SpiffeID)
	assert.Equal(t, registrarID, reg.Registrar)
	assert.Equal(t, ns+"/caller", reg.ClientName)
	assert.NotEmpty(t, reg.ClientID)
	assert.Contains(t, condition(te, v1alpha1.ConditionClientRegistered).Message, "no client secret exists")

	// config.yaml, as the data plane parses and resolves it: the client and the SVID's audience.
	var cm corev1.ConfigMap
	eventually(t, "config.yaml carries the registered client", func(ctx context.Context) (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ConfigMapName("caller")}, &cm); err != nil {
			return false, err.Error()
		}
		return strings.Contains(cm.Data[resources.ConfigKey], reg.ClientID), cm.Data[resources.ConfigKey]
	})
	over, err := authconfig.Parse([]byte(cm.Data[resources.ConfigKey]))
	require.NoError(t, err)
	// The defaults the injector gives a SPIFFE pod (defaults.env): the built-in ones, SPIFFE on.
	env := map[string]string{"KAGENTI_SPIFFE_ENABLED": "true", "KAGENTI_SPIFFE_SOCKET": "/run/spire/agent-sockets/agent.sock", "KAGENTI_JWT_AUDIENCE": "kagenti-agents"}
	defaults, err := authconfig.DefaultsFromEnv(func(k string) (string, bool) {
		if v, ok := env[k]; ok {
			return v, true
		}
		return identity.BuiltIn(k)
	})
	require.NoError(t, err)
	cfg, err := authconfig.Resolve(defaults, over, authconfig.Workload{Namespace: ns, Name: "caller", ServiceAccount: "caller"})
	require.NoError(t, err)
	assert.Equal(t, authconfig.ClientAuthJWTSVID, cfg.ClientRegistration.ClientAuthentication)
	assert.Equal(t, reg.ClientID, cfg.ClientRegistration.ClientID)
	assert.Equal(t, issuer, cfg.Spiffe.Audience, "the JWT SVID is the client assertion: its audience is the provider")
	assert.Equal(t, workloadID, cfg.SpiffeID)

	var secrets corev1.SecretList
	must(t, k8s.List(ctx, &secrets, client.InNamespace(ns)))
	assert.Empty(t, secrets.Items, "no Secret holds a credential of the workload")

	// The workload's client authenticates with its JWT SVID, as the outbound proxy sends it …
	subject := clientCredentialsToken(t, issuer, "user", "user-secret")
	ex := outbound.NewExchanger(http.DefaultClient)
	exchange := func(assertionOf string) (string, error) {
		return ex.Exchange(ctx, outbound.Request{TokenURL: cfg.Outbound.TokenExchange.TokenURL, SubjectToken: subject, Audience: "downstream-" + assertionOf[len(assertionOf)-6:],
			Credentials: outbound.Credentials{ClientID: cfg.ClientRegistration.ClientID, Assertion: suiteSVIDs.mint(assertionOf, cfg.Spiffe.Audience)}})
	}
	tok, err := exchange(workloadID)
	require.NoError(t, err)
	assert.NotEmpty(t, tok)
	// The IdP's stderr reaches idpLog through a pipe and a goroutine: the line may land just after
	// the response does.
	authenticated := "client " + reg.ClientID + " authenticated with a JWT SVID client assertion of " + workloadID
	eventually(t, "the IdP logs the JWT SVID authentication", func(context.Context) (bool, string) {
		return strings.Contains(idpLog(), authenticated), idpLog()
	})
	// … and another workload's SVID does not authenticate it.
	_, err = exchange("spiffe://cluster.local/ns/" + ns + "/sa/intruder")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "invalid_client")

	// Reconciles after the registration reuse it: a changed setting unrelated to the client
	// registers nothing new.
	te = getTX(ctx, t, ns, "caller")
	te.Spec.Inbound = &v1alpha1.InboundSpec{TargetPort: ptr.To[int32](9000)}
	must(t, k8s.Update(ctx, te))
	eventually(t, "the change is rendered", func(ctx context.Context) (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ConfigMapName("caller")}, &cm); err != nil {
			return false, err.Error()
		}
		return strings.Contains(cm.Data[resources.ConfigKey], "9000"), cm.Data[resources.ConfigKey]
	})
	assert.Contains(t, cm.Data[resources.ConfigKey], reg.ClientID)
	assert.Equal(t, reg.ClientID, getTX(ctx, t, ns, "caller").Status.ClientRegistration.ClientID)
	assert.Equal(t, 1, strings.Count(idpLog(), "registered client"), "one registration: %s", idpLog())
}

// A registration that cannot be made says why, in ClientRegistered and Ready, and is retried: the
// controller without its SVID (RegistrarUnavailable), a provider that does not allow it as a
// registrar (RegistrationRefused), an unreachable provider (RegistrationFailed). The ConfigMap is
// written meanwhile, without a client.
func TestClientRegistrationFailuresAreReportedAndRetried(t *testing.T) {
	ctx := context.Background()
	issuer, _ := devIdP(t, "--registrar", "spiffe://cluster.local/ns/kagenti-system/sa/someone-else")
	ns := namespace(t)
	must(t, k8s.Create(ctx, deployment(ns, "agent", 1, true)))
	t.Cleanup(func() { suiteSVIDs.set(registrarID, nil) })

	suiteSVIDs.set(registrarID, errors.New("no identity issued"))
	must(t, k8s.Create(ctx, jwtSVIDExchange(ns, "agent", "agent", issuer)))
	te := waitCondition(t, ns, "agent", v1alpha1.ConditionClientRegistered, metav1.ConditionFalse, v1alpha1.ReasonRegistrarUnavailable)
	assert.Contains(t, condition(te, v1alpha1.ConditionClientRegistered).Message, "no identity issued")
	assert.Equal(t, metav1.ConditionFalse, condition(te, v1alpha1.ConditionReady).Status)
	assert.True(t, condition(te, v1alpha1.ConditionConfigMapReady).Status == metav1.ConditionTrue, "the ConfigMap is written without a client")
	// … with its startup settings, so that a pod starting while the registration waits starts on them.
	var cm corev1.ConfigMap
	must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ConfigMapName("agent")}, &cm))
	over, err := authconfig.Parse([]byte(cm.Data[resources.ConfigKey]))
	require.NoError(t, err)
	assert.Equal(t, issuer, over.Spiffe.Audience)
	assert.Empty(t, over.ClientRegistration.ClientID)

	suiteSVIDs.set(registrarID, nil) // now the provider refuses this registrar
	te = waitCondition(t, ns, "agent", v1alpha1.ConditionClientRegistered, metav1.ConditionFalse, v1alpha1.ReasonRegistrationRefused)
	assert.Contains(t, condition(te, v1alpha1.ConditionClientRegistered).Message, "is not an allowed registrar")
	assert.Equal(t, v1alpha1.ReasonRegistrationRefused, condition(te, v1alpha1.ConditionReady).Reason)

	te = getTX(ctx, t, ns, "agent")
	gone := "http://127.0.0.1:1"
	te.Spec.ClientRegistration.OIDC.RegistrationURL = gone + "/register"
	must(t, k8s.Update(ctx, te))
	te = waitCondition(t, ns, "agent", v1alpha1.ConditionClientRegistered, metav1.ConditionFalse, v1alpha1.ReasonRegistrationFailed)
	assert.Contains(t, condition(te, v1alpha1.ConditionClientRegistered).Message, "registration endpoint "+gone)
	assert.Nil(t, te.Status.ClientRegistration)
}

// The API refuses jwtSVID where it cannot work, naming the field.
func TestJWTSVIDClientAuthenticationIsValidated(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	keycloak := tokenExchange(ns, "kc", "agent")
	keycloak.Spec.ClientRegistration = &v1alpha1.ClientRegistrationSpec{ClientAuthentication: v1alpha1.ClientAuthJWTSVID}
	err := k8s.Create(ctx, keycloak)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.clientRegistration.clientAuthentication: Invalid value")
	assert.Contains(t, err.Error(), "needs provider oidc with oidc.issuer and oidc.registrationUrl")

	noSpiffe := jwtSVIDExchange(ns, "nospiffe", "agent", "http://idp.example")
	noSpiffe.Spec.Spiffe = &v1alpha1.SpiffeSpec{Enabled: ptr.To(false)}
	err = k8s.Create(ctx, noSpiffe)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "clientAuthentication jwtSVID needs SPIFFE")

	off := jwtSVIDExchange(ns, "off", "agent", "http://idp.example")
	off.Spec.ClientRegistration.Enabled = ptr.To(false)
	err = k8s.Create(ctx, off)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "it needs enabled")
}

// clientCredentialsToken gets a token of the dev IdP's client id (the end user's, in these tests).
func clientCredentialsToken(t *testing.T, issuer, id, secret string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, issuer+"/oauth/token", strings.NewReader(url.Values{"grant_type": {"client_credentials"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(id, secret)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		AccessToken string `json:"access_token"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.NotEmpty(t, out.AccessToken)
	return out.AccessToken
}
