package v1alpha1

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/pkg/configmap/identity"

	"github.com/kagenti/platform/pkg/configmap/authz"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// templateBomb is testdata/template-bomb.txt (issue 12): 116 characters of nested printf/print
// variables that made Go's text/template allocate 6 GB (and take 48 s) each time the old validator
// executed them. The webhook's and the controller's tests read the same file.
var templateBomb = func() string {
	b, err := os.ReadFile("testdata/template-bomb.txt")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func TestValidateClientNameTemplate(t *testing.T) {
	for _, tc := range []struct {
		tmpl    string
		wantErr string
	}{
		{tmpl: "agent-{{.PodName}}"},
		{tmpl: "{{.Namespace}}/{{.WorkloadName}}"},
		{tmpl: "{{ .ServiceAccount }}@{{.Namespace}}"},
		{tmpl: "fixed-name"},
		{tmpl: "agent-{{.PodName", wantErr: "not closed with }}"},
		{tmpl: "agent-{{.Pod}}", wantErr: "unknown variable .Pod; allowed: {{.PodName}}"},
		{tmpl: "{{.PodName.Foo}}", wantErr: "unknown variable .PodName.Foo"},
		{tmpl: "{{.}}", wantErr: "not a placeholder"},
		{tmpl: "{{$.Namespace}}", wantErr: "not a placeholder"},
		{tmpl: "{{.PodName | printf \"%s\"}}", wantErr: "not a placeholder"},
		{tmpl: "{{if .PodName}}x{{end}}", wantErr: "not a placeholder"},
		{tmpl: `{{define "x"}}a{{end}}`, wantErr: "not a placeholder"},
		{tmpl: "{{- .PodName -}}", wantErr: "not a placeholder"},
		{tmpl: "{{. PodName}}", wantErr: "not a placeholder"},
		{tmpl: templateBomb, wantErr: "not a placeholder; allowed"},
		{tmpl: "a }}", wantErr: `' ' at offset 1 is not allowed in literal text`},
		{tmpl: "a}b", wantErr: `'}' at offset 1`},
		{tmpl: "{{.PodName}}}", wantErr: `'}' at offset 12`},
		{tmpl: "{x}", wantErr: `'{' at offset 0`},
		{tmpl: "a\tb", wantErr: `'\t' at offset 1`},
		{tmpl: "", wantErr: "must not be empty"},
		{tmpl: strings.Repeat("a", 254), wantErr: "at most 253 characters (has 254)"},
		{tmpl: strings.Repeat("é", 253)},
	} {
		t.Run(tc.tmpl, func(t *testing.T) {
			err := ValidateClientNameTemplate(tc.tmpl)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			if assert.Error(t, err) {
				assert.Contains(t, err.Error(), tc.wantErr)
			}
		})
	}
}

func TestValidateFieldPath(t *testing.T) {
	te := &TokenExchange{Spec: TokenExchangeSpec{ClientRegistration: &ClientRegistrationSpec{
		Keycloak: &KeycloakSpec{ClientNameTemplate: "{{.Nope}}"}}}}
	errs := te.Validate()
	if assert.Len(t, errs, 1) {
		assert.Equal(t, "spec.clientRegistration.keycloak.clientNameTemplate", errs[0].Field)
	}
	te.Spec.ClientRegistration.Keycloak.ClientNameTemplate = "{{.Namespace}}/{{.PodName}}"
	assert.Empty(t, te.Validate())
}

// TestValidateRefusesAClientNameThatCouldBeAnotherNamespaces is issue 26's takeover at
// admission: team-a's TokenExchange naming team-b's client ("team-b/agent"), or any template that
// does not start with the namespace, is refused with the field path.
func TestValidateRefusesAClientNameThatCouldBeAnotherNamespaces(t *testing.T) {
	for _, tmpl := range []string{"team-b/agent", "agent-{{.PodName}}", "{{.WorkloadName}}-{{.Namespace}}", "{{.Namespace}}-{{.WorkloadName}}"} {
		te := &TokenExchange{Spec: TokenExchangeSpec{ClientRegistration: &ClientRegistrationSpec{
			Keycloak: &KeycloakSpec{ClientNameTemplate: tmpl}}}}
		errs := te.Validate()
		if assert.Len(t, errs, 1, tmpl) {
			assert.Equal(t, "spec.clientRegistration.keycloak.clientNameTemplate", errs[0].Field)
			assert.Contains(t, errs[0].Error(), "must start with {{.Namespace}} followed by '/'")
		}
	}
}

// namespaceCorpus holds templates on both sides of ClientNameNamespacePattern.
var namespaceCorpus = []string{
	"{{.Namespace}}/{{.WorkloadName}}", "{{ .Namespace }}/x", "{{.Namespace}}", "{{.Namespace}}.x", "{{.Namespace}}X",
	"{{.Namespace}}é", "{{.Namespace}}_{{.PodName}}", "{{  .Namespace}}:{{.ServiceAccount}}",
	"team-b/agent", "x{{.Namespace}}/", "{{.Namespace}}-x", "{{.Namespace}}a", "{{.Namespace}}0", "{{.Namespace}}{{.PodName}}",
	"{{.NamespaceX}}/x", "{{.Namespace", "{{.Namespace }", "{{ . Namespace}}/x", "{{.WorkloadName}}/{{.Namespace}}", "",
}

func TestClientNameNamespacePatternAgreesWithValidator(t *testing.T) {
	pattern := regexp.MustCompile(ClientNameNamespacePattern)
	for _, s := range append(namespaceCorpus, patternCorpus...) {
		assert.Equal(t, ValidateNamespacedClientName(s) == nil, pattern.MatchString(s), "%q", s)
	}
}

func FuzzClientNameNamespacePatternAgreesWithValidator(f *testing.F) {
	for _, s := range namespaceCorpus {
		f.Add(s)
	}
	pattern := regexp.MustCompile(ClientNameNamespacePattern)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		if (ValidateNamespacedClientName(s) == nil) != pattern.MatchString(s) {
			t.Errorf("%q: validator and pattern disagree", s)
		}
	})
}

// TestValidateRejectsFieldsWithoutEffect: a TokenExchange stored before the CRD rejected them
// (the API server does not re-validate stored objects) is refused by the controller with the same
// field path and message as the CRD's rule.
func TestValidateRejectsFieldsWithoutEffect(t *testing.T) {
	for _, tc := range []struct {
		name, field, msg string
		spec             TokenExchangeSpec
	}{
		{"adminCredentialsSecret", "spec.clientRegistration.keycloak.adminCredentialsSecret", msgAdminCredentialsSecret,
			TokenExchangeSpec{ClientRegistration: &ClientRegistrationSpec{Keycloak: &KeycloakSpec{AdminCredentialsSecret: "kc-admin"}}}},
		{"proxyUid", "spec.outbound.trafficInterception.proxyUid", msgProxyUID,
			TokenExchangeSpec{Outbound: &OutboundSpec{TrafficInterception: &TrafficInterceptionSpec{ProxyUID: new(int64(1337))}}}},
		{"outputFormat x509", "spec.spiffe.outputFormat", msgOutputFormat,
			TokenExchangeSpec{Spiffe: &SpiffeSpec{OutputFormat: "x509"}}},
		{"socketPath elsewhere", "spec.spiffe.socketPath", msgSocketPath,
			TokenExchangeSpec{Spiffe: &SpiffeSpec{SocketPath: "unix:///var/run/spire/agent.sock"}}},
		{"socketPath leaving the directory", "spec.spiffe.socketPath", msgSocketPath,
			TokenExchangeSpec{Spiffe: &SpiffeSpec{SocketPath: "/run/spire/agent-sockets/../agent.sock"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := (&TokenExchange{Spec: tc.spec}).Validate()
			if assert.Len(t, errs, 1) {
				assert.Equal(t, tc.field, errs[0].Field)
				assert.Contains(t, errs[0].Error(), tc.msg)
			}
		})
	}
	ok := &TokenExchange{Spec: TokenExchangeSpec{Spiffe: &SpiffeSpec{OutputFormat: "jwt", SocketPath: "unix:///run/spire/agent-sockets/spire/agent.sock"}}}
	assert.Empty(t, ok.Validate())
}

func TestInSpireSocketDir(t *testing.T) {
	for path, want := range map[string]bool{
		"/run/spire/agent-sockets/agent.sock":        true,
		"unix:///run/spire/agent-sockets/agent.sock": true,
		"/run/spire/agent-sockets/a/api.sock":        true,
		"/run/spire/agent-sockets/.agent.sock":       true,
		"/run/spire/agent-sockets/":                  false,
		"/run/spire/agent-sockets":                   false,
		"/run/spire/agent-socketsX/agent.sock":       false,
		"/run/spire/sockets/agent.sock":              false,
		"/run/spire/agent-sockets/../x.sock":         false,
		"/run/spire/agent-sockets/./agent.sock":      false,
		"/run/spire/agent-sockets/a/..":              false,
		"/run/spire/agent-sockets/a b":               false,
		"unix://unix:///run/spire/agent-sockets/a":   false,
	} {
		assert.Equal(t, want, InSpireSocketDir(path), path)
	}
}

func TestRenderClientName(t *testing.T) {
	vars := ClientNameVars{PodName: "p-1", Namespace: "agents", WorkloadName: "weather", ServiceAccount: "sa"}
	for tmpl, want := range map[string]string{
		"agent-{{.Namespace}}-{{.PodName}}":                          "agent-agents-p-1",
		"{{ .ServiceAccount }}@{{.WorkloadName}}{{.WorkloadName}}.x": "sa@weatherweather.x",
		"fixed": "fixed",
	} {
		got, err := RenderClientName(tmpl, vars)
		assert.NoError(t, err)
		assert.Equal(t, want, got, tmpl)
	}
	_, err := RenderClientName(templateBomb, vars)
	assert.ErrorContains(t, err, "not a placeholder")
}

// parserAgreesWithPattern is the property the CRD's CEL rule relies on: within the length bound,
// the API server's regular expression accepts exactly the templates the parser accepts.
func parserAgreesWithPattern(t *testing.T, pattern *regexp.Regexp, s string) {
	t.Helper()
	if utf8.RuneCountInString(s) > MaxClientNameTemplateLength {
		return // the CRD's maxLength rejects it before CEL runs
	}
	parsed := ValidateClientNameTemplate(s) == nil
	assert.Equal(t, parsed, pattern.MatchString(s), "%q: parser accepts=%v, CEL pattern accepts=%v", s, parsed, !parsed)
}

var patternCorpus = []string{
	"agent-{{.PodName}}", "{{.Namespace}}/{{.WorkloadName}}", "{{  .ServiceAccount  }}", "x", "é",
	"", "{{", "}}", "{", "}", "{{}}", "{{.}}", "{{.Pod}}", "{{.PodName}", "{{.PodName}}}", "{{{.PodName}}",
	"{{.PodName }}x{{ .Namespace}}", "{{\t.PodName}}", "a b", "a\x7fb", "a\nb", "{{.PodName.X}}",
	"{{$x := .PodName}}{{$x}}", templateBomb, "{{printf \"%s\" .PodName}}", "{{.PodName|print}}",
	"{{ . PodName }}", "\u00a0", "a{{.WorkloadName}}{{.WorkloadName}}b",
}

func TestClientNameTemplatePatternAgreesWithParser(t *testing.T) {
	pattern := regexp.MustCompile(ClientNameTemplatePattern)
	for _, s := range patternCorpus {
		parserAgreesWithPattern(t, pattern, s)
	}
}

func FuzzClientNameTemplatePatternAgreesWithParser(f *testing.F) {
	for _, s := range patternCorpus {
		f.Add(s)
	}
	pattern := regexp.MustCompile(ClientNameTemplatePattern)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // the API server only sees valid UTF-8 (JSON)
		}
		parserAgreesWithPattern(t, pattern, s)
	})
}

// TestCRDRuleIsThePattern ties the generated CRD to ClientNameTemplatePattern: the rule the API
// server runs is self.matches() of exactly that expression, under the same maxLength.
func TestCRDRuleIsThePattern(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "crds", "tokenexchange", "kagenti.io_tokenexchanges.yaml"))
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.Unmarshal(data, &crd))
	require.Len(t, crd.Spec.Versions, 1)
	prop := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].
		Properties["clientRegistration"].Properties["keycloak"].Properties["clientNameTemplate"]
	require.NotNil(t, prop.MaxLength)
	assert.EqualValues(t, MaxClientNameTemplateLength, *prop.MaxLength)
	require.Len(t, prop.XValidations, 2)
	assert.Equal(t, "self.matches('"+ClientNameTemplatePattern+"')", prop.XValidations[0].Rule)
	assert.Equal(t, "self.matches('"+ClientNameNamespacePattern+"')", prop.XValidations[1].Rule)
	assert.Equal(t, identity.ErrClientNameNotNamespaced.Error(), prop.XValidations[1].Message)
}

// TestValidatingTheBombAllocatesLittle: checking a template is one scan of at most 253 characters,
// whatever it contains (the old text/template validator allocated 6 GB for templateBomb).
func TestValidatingTheBombAllocatesLittle(t *testing.T) {
	const runs = 100
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		_ = ValidateClientNameTemplate(templateBomb)
		_, _ = RenderClientName(templateBomb, ClientNameVars{})
	}
	runtime.ReadMemStats(&after)
	perRun := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("%d bytes allocated per validate+render of the bomb", perRun)
	assert.Less(t, perRun, uint64(16<<10))
}

func BenchmarkValidateClientNameTemplate(b *testing.B) {
	for name, tmpl := range map[string]string{
		"default": "{{.Namespace}}/{{.WorkloadName}}",
		"bomb":    templateBomb,
		"longest": strings.Repeat("{{.PodName}}", MaxClientNameTemplateLength/len("{{.PodName}}")),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = ValidateClientNameTemplate(tmpl)
			}
		})
	}
}

func withPolicy(a *AuthorizationSpec) *TokenExchange {
	return &TokenExchange{Spec: TokenExchangeSpec{Inbound: &InboundSpec{Authorization: a}}}
}

// Validate compiles the policy as the proxy does and names each bad rule's field, with the rule's
// name and what is wrong; a policy that compiles passes.
func TestValidateNamesTheRuleThatDoesNotCompile(t *testing.T) {
	ok := AuthorizationRule{Name: "only-middle", Effect: EffectAllow, When: `caller == "spiffe://cluster.local/ns/a/sa/middle"`}
	assert.Empty(t, withPolicy(&AuthorizationSpec{Rules: []AuthorizationRule{ok}, Default: EffectDeny}).Validate())

	errs := withPolicy(&AuthorizationSpec{Default: "deny", Rules: []AuthorizationRule{
		ok,
		{Name: "read-only", Effect: EffectAllow, When: `request.rpcMethod in ["tasks/get"]`},
		{Name: "groups", Effect: EffectAllow, When: `"finance" in group`},
		{Name: "not-bool", Effect: EffectDeny, When: `subject`},
		{Name: "only-middle", Effect: "Maybe", When: `true`},
	}}).Validate()
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	assert.Equal(t, []string{
		`spec.inbound.authorization.default: Unsupported value: "deny": supported values: "Allow", "Deny"`,
		`spec.inbound.authorization.rules[2].when: Invalid value: "\"finance\" in group": rule "groups" does not compile: 1:14: undeclared reference to 'group' (in container '')`,
		`spec.inbound.authorization.rules[3].when: Invalid value: "subject": rule "not-bool" does not compile: the expression is a string, not a bool`,
		`spec.inbound.authorization.rules[4].name: Invalid value: "only-middle": rule "only-middle" repeats the name of rules[0]`,
		`spec.inbound.authorization.rules[4].effect: Invalid value: "Maybe": rule "only-middle" has effect "Maybe", not Allow or Deny`,
	}, got)
}

// The CRD's bounds and name pattern on the policy are the authz package's, which the webhook and
// the proxy apply.
func TestCRDPolicyBoundsAreTheEngines(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "crds", "tokenexchange", "kagenti.io_tokenexchanges.yaml"))
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.Unmarshal(data, &crd))
	az := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["inbound"].Properties["authorization"]
	rules := az.Properties["rules"]
	assert.EqualValues(t, authz.MaxRules, *rules.MaxItems)
	assert.Equal(t, "map", *rules.XListType)
	assert.Equal(t, []string{"name"}, rules.XListMapKeys)
	rule := rules.Items.Schema.Properties
	assert.EqualValues(t, authz.MaxNameLength, *rule["name"].MaxLength)
	assert.Equal(t, authz.NamePattern, rule["name"].Pattern)
	assert.EqualValues(t, authz.MaxExpressionLength, *rule["when"].MaxLength)
	assert.EqualValues(t, authconfig.MaxChainDepth, *az.Properties["maxChainDepth"].Maximum)
}

// The webhook and the controller refuse the external authorizers the proxy's client refuses, each
// error naming its field.
func TestValidateRefusesAPlaintextRemoteExternalAuthorizer(t *testing.T) {
	ok := &ExternalAuthorizerSpec{Address: "127.0.0.1:9191", Timeout: "250ms"}
	assert.Empty(t, withPolicy(&AuthorizationSpec{External: ok}).Validate())
	assert.Empty(t, withPolicy(&AuthorizationSpec{External: &ExternalAuthorizerSpec{Address: "unix:///run/opa/opa.sock"}}).Validate())

	errs := withPolicy(&AuthorizationSpec{External: &ExternalAuthorizerSpec{Address: "opa.policy.svc:9191", Timeout: "10s"}}).Validate()
	var got []string
	for _, e := range errs {
		got = append(got, e.Field+": "+e.Detail)
	}
	assert.Equal(t, []string{
		`spec.inbound.authorization.external.address: external.address: "opa.policy.svc:9191" is not loopback or a unix socket: plaintext only to localhost, 127.0.0.0/8, [::1] or unix:; set external.tls for a remote authorizer`,
		`spec.inbound.authorization.external.timeout: external.timeout: 10s is not 10ms to 5s`,
	}, got)

	errs = withPolicy(&AuthorizationSpec{External: &ExternalAuthorizerSpec{Address: "opa.policy.svc:9191",
		TLS: &ExternalAuthorizerTLS{CABundle: "not PEM"}}}).Validate()
	require.Len(t, errs, 1)
	assert.Equal(t, "spec.inbound.authorization.external.tls.caBundle", errs[0].Field)
}

// The CRD's CEL rules on the external authorizer are authz's patterns, which the webhook, the
// data plane and the client apply: admission refuses a plaintext remote address exactly as the
// client does.
func TestCRDExternalAuthorizerRulesAreTheClients(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "crds", "tokenexchange", "kagenti.io_tokenexchanges.yaml"))
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.Unmarshal(data, &crd))
	ext := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["inbound"].
		Properties["authorization"].Properties["external"]
	cel := func(pattern string) string { return "'" + strings.ReplaceAll(pattern, `\`, `\\`) + "'" }
	require.Len(t, ext.XValidations, 1)
	assert.Equal(t, "has(self.tls) || self.address.matches("+cel(authz.PlaintextTargetPattern)+")", ext.XValidations[0].Rule)
	assert.Equal(t, ".address", ext.XValidations[0].FieldPath)
	addr := ext.Properties["address"]
	require.Len(t, addr.XValidations, 1)
	assert.Equal(t, "self.matches("+cel(authz.ExternalTargetPattern)+")", addr.XValidations[0].Rule)
	assert.Equal(t, []string{"address"}, ext.Required)
	timeout := ext.Properties["timeout"].XValidations[0].Rule
	assert.Contains(t, timeout, "duration(self) >= duration('"+authz.MinExternalTimeout.String()+"')")
	assert.Contains(t, timeout, "duration(self) <= duration('"+authz.MaxExternalTimeout.String()+"')")
}
