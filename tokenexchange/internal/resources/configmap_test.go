package resources

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// Golden files: testdata/<case>.input.yaml is a TokenExchange, testdata/<case>.golden.yaml the
// ConfigMap MakeConfigMap renders for it. Refresh with UPDATE_GOLDEN=1 go test ./internal/resources/.
var update = os.Getenv("UPDATE_GOLDEN") == "1"

func readInput(t testing.TB, path string) *v1alpha1.TokenExchange {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	te := &v1alpha1.TokenExchange{}
	require.NoError(t, yaml.UnmarshalStrict(b, te), path)
	return te
}

func targetOf(te *v1alpha1.TokenExchange) Target {
	return Target{Kind: te.Spec.TargetRef.Kind, Name: te.Spec.TargetRef.Name, Namespace: te.Namespace}
}

func TestMakeConfigMapGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.input.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, inputs)
	used := map[string]bool{}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.yaml")
		golden := filepath.Join("testdata", name+".golden.yaml")
		used[golden] = true
		t.Run(name, func(t *testing.T) {
			te := readInput(t, in)
			got, err := yaml.Marshal(MakeConfigMap(te, targetOf(te)))
			require.NoError(t, err)
			if update {
				require.NoError(t, os.WriteFile(golden, got, 0o644))
				return
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "missing golden file; run with UPDATE_GOLDEN=1")
			assert.Equal(t, string(want), string(got), "rendering changed; if intended, run with UPDATE_GOLDEN=1")
		})
	}
	goldens, err := filepath.Glob("testdata/*.golden.yaml")
	require.NoError(t, err)
	for _, g := range goldens {
		if !used[g] {
			if update {
				require.NoError(t, os.Remove(g))
				continue
			}
			t.Errorf("stale golden file %s has no input; delete it or run with UPDATE_GOLDEN=1", g)
		}
	}
}

func TestMakeConfigMapIsDeterministic(t *testing.T) {
	te := readInput(t, "testdata/seed.input.yaml")
	a := MakeConfigMap(te, targetOf(te))
	for range 20 {
		assert.Equal(t, a, MakeConfigMap(te, targetOf(te)))
	}
}

func TestMakeConfigMapNameAndKeys(t *testing.T) {
	te := readInput(t, "testdata/minimal.input.yaml")
	cm := MakeConfigMap(te, targetOf(te))
	assert.Equal(t, "weather-agent-token-exchange", cm.Name)
	assert.Equal(t, "agents", cm.Namespace)
	assert.ElementsMatch(t, []string{ConfigKey}, keys(cm.Data), "config.yaml only: helper.conf is rendered in the pod at start, routes live in config.yaml")

	long := strings.Repeat("a", 60)
	cm = MakeConfigMap(te, Target{Kind: "Deployment", Name: long, Namespace: "agents"})
	assert.LessOrEqual(t, len(cm.Name), 63, "names are shortened with a hash")
}

// TestOverridesCarryEveryField converts a spec with every field set: each one reaches the data
// plane's schema with its value (and the conversion's strict decoding accepts it).
func TestOverridesCarryEveryField(t *testing.T) {
	te := &v1alpha1.TokenExchange{}
	fill(reflect.ValueOf(&te.Spec).Elem(), 1)
	te.Spec.TargetRef = duck.TargetRef{Kind: "Deployment", Name: "w"}
	// A client name template must name the namespace first (the filler's string would not).
	te.Spec.ClientRegistration.Keycloak.ClientNameTemplate = "{{.Namespace}}/w"
	// An authorization policy must compile (the filler's strings are no effects or CEL).
	az := te.Spec.Inbound.Authorization
	az.Default = v1alpha1.EffectDeny
	for i := range az.Rules {
		az.Rules[i].Effect, az.Rules[i].When = v1alpha1.EffectAllow, "true"
	}
	// An external authorizer needs an address, a timeout and a CA bundle the client accepts.
	az.External.Address, az.External.Timeout = "opa.policy.svc:9191", "250ms"
	az.External.TLS.CABundle = string(testCA(t))
	// The fields the API rejects because they cannot take effect are not in the data plane's
	// schema; the controller validates before it renders, so they never reach Overrides.
	assert.ElementsMatch(t, []string{"spec.clientRegistration.keycloak.adminCredentialsSecret", "spec.outbound.trafficInterception.proxyUid",
		"spec.spiffe.socketPath", "spec.spiffe.outputFormat"}, fieldsOf(te.Validate()))
	te.Spec.ClientRegistration.Keycloak.AdminCredentialsSecret = ""
	te.Spec.Outbound.TrafficInterception.ProxyUID = nil
	got, err := json.Marshal(Overrides(te))
	require.NoError(t, err)
	want, err := json.Marshal(te.Spec)
	require.NoError(t, err)
	var gotMap, wantMap map[string]any
	require.NoError(t, json.Unmarshal(got, &gotMap))
	require.NoError(t, json.Unmarshal(want, &wantMap))
	delete(wantMap, "targetRef")
	assert.Equal(t, wantMap, gotMap)
}

func TestOverridesCarryOnlyWhatIsSet(t *testing.T) {
	te := readInput(t, "testdata/minimal.input.yaml")
	assert.Equal(t, authconfig.Spec{}, Overrides(te), "a TokenExchange that sets nothing overrides nothing")
	cm := MakeConfigMap(te, targetOf(te))
	spec, err := authconfig.Parse([]byte(cm.Data[ConfigKey]))
	require.NoError(t, err)
	assert.Equal(t, authconfig.Spec{}, spec)
}

// fill sets every field reachable from v (pointers allocated, strings, numbers and slices set).
func fill(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), seed)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), seed+i+1)
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fill(s.Index(0), seed)
		fill(s.Index(1), seed+100)
		v.Set(s)
	case reflect.String:
		v.SetString(fmt.Sprintf("v%d", seed))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int32, reflect.Int64:
		v.SetInt(int64(seed))
	default:
		panic("fill: unhandled kind " + v.Kind().String())
	}
}

func fieldsOf(errs field.ErrorList) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Field
	}
	return out
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func BenchmarkMakeConfigMap(b *testing.B) {
	te := readInput(b, "testdata/seed.input.yaml")
	t := targetOf(te)
	b.ReportAllocs()
	for b.Loop() {
		MakeConfigMap(te, t)
	}
}

func BenchmarkMakeConfigMap64Rules(b *testing.B) {
	te := readInput(b, "testdata/seed.input.yaml")
	rules := te.Spec.Outbound.TokenExchange.DestinationRules
	for i := len(rules); i < 64; i++ {
		r := rules[0]
		r.Match.Host = strings.Repeat("x", i%10+1) + ".example.com"
		rules = append(rules, r)
	}
	te.Spec.Outbound.TokenExchange.DestinationRules = rules
	t := targetOf(te)
	b.ReportAllocs()
	for b.Loop() {
		MakeConfigMap(te, t)
	}
}

// TestOIDCProviderReachesTheDataPlane: a TokenExchange selecting provider oidc over the injector's
// Keycloak defaults resolves, in the data plane's own parser, to the OIDC provider's endpoints.
func TestOIDCProviderReachesTheDataPlane(t *testing.T) {
	te := readInput(t, "testdata/oidc.input.yaml")
	spec, err := authconfig.Parse([]byte(MakeConfigMap(te, targetOf(te)).Data[ConfigKey]))
	require.NoError(t, err)
	env := map[string]string{
		"KAGENTI_WORKLOAD": "weather-agent", "KAGENTI_TRUST_DOMAIN": "cluster.local",
		"KAGENTI_SPIFFE_SOCKET": "/run/spire/agent-sockets/agent.sock", "KAGENTI_JWT_AUDIENCE": "kagenti-agents",
		"KAGENTI_IDP_URL": "http://keycloak.kagenti-system.svc:8080", "KAGENTI_REALM": "default",
		"KAGENTI_CLIENT_NAME_TEMPLATE": "{{.Namespace}}/{{.WorkloadName}}", "KAGENTI_DEFAULT_AUDIENCE": "kagenti-agents",
		"KAGENTI_INBOUND_PORT": "8080", "KAGENTI_TARGET_PORT": "8081", "KAGENTI_OUTBOUND_PORT": "15123", "KAGENTI_PROXY_UID": "1337",
	}
	defaults, err := authconfig.DefaultsFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	c, err := authconfig.Resolve(defaults, spec, authconfig.Workload{Namespace: "agents", Name: "weather-agent", PodName: "weather-agent-0", ServiceAccount: "weather"})
	require.NoError(t, err)
	assert.Equal(t, authconfig.IdP{Provider: authconfig.ProviderOIDC, Issuer: "https://idp.example.com",
		TokenURL: "https://idp.example.com/oauth2/token", JWKSURL: "https://idp.example.com/oauth2/keys",
		RegistrationURL: "https://idp.example.com/oauth2/register"}, c.IdP)
	assert.Equal(t, "https://idp.example.com/oauth2/token", c.Outbound.TokenExchange.TokenURL, "the exchange uses the provider's token URL")
}

// testCA is a self-signed CA certificate, PEM-encoded.
func testCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// policyConfigGolden is config.yaml as MakeConfigMap renders it for a TokenExchange with an
// authorization policy, kept in the shared module for the other reader of these bytes: agentcard's
// discovery API (pkg/configmap/authz.ParseWorkloadPolicy, and the discovery API's envtest).
// Refresh with UPDATE_GOLDEN=1.
const policyConfigGolden = "../../../pkg/configmap/authz/testdata/tokenexchange-policy.config.yaml"

func TestMakeConfigMapWritesThePolicyAgentcardReads(t *testing.T) {
	te := &v1alpha1.TokenExchange{}
	te.Namespace, te.Name = "agents", "guarded"
	te.Spec.TargetRef = duck.TargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "guarded"}
	te.Spec.Inbound = &v1alpha1.InboundSpec{Authorization: &v1alpha1.AuthorizationSpec{Rules: []v1alpha1.AuthorizationRule{
		{Name: "no-bob", Effect: v1alpha1.EffectDeny, When: `caller.endsWith("/sa/bob")`},
		{Name: "only-alice", Effect: v1alpha1.EffectAllow, When: `caller.endsWith("/sa/alice")`},
		{Name: "reads", Effect: v1alpha1.EffectAllow, When: `request.rpcMethod == "tasks/get"`},
	}}}
	got := MakeConfigMap(te, targetOf(te)).Data[ConfigKey]
	if update {
		require.NoError(t, os.WriteFile(policyConfigGolden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(policyConfigGolden)
	require.NoError(t, err, "missing golden file; run with UPDATE_GOLDEN=1")
	assert.Equal(t, string(want), got, "config.yaml changed: agentcard reads it too; refresh with UPDATE_GOLDEN=1 and check its reader")
}
