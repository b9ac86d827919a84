package controller_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/pkg/configmap/authz"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// TestAPIServerRejectsInvalidSpecs checks the CRD schema and CEL rules on the real API server
// (without the webhook), with the field path and message a user sees.
func TestAPIServerRejectsInvalidSpecs(t *testing.T) {
	ns := namespace(t)
	for _, tc := range []struct {
		name, spec string
		want       []string
	}{
		{"keycloak url not http", `{keycloak: {url: "ftp://kc.example.com", realm: r}}`,
			[]string{"spec.clientRegistration.keycloak.url", "must be an http or https URL with a host"}},
		{"keycloak url no host", `{keycloak: {url: "http://", realm: r}}`,
			[]string{"spec.clientRegistration.keycloak.url", "must be an http or https URL with a host"}},
		{"provider without url", `{provider: keycloak, keycloak: {realm: r}}`,
			[]string{"spec.clientRegistration.keycloak", "provider keycloak requires keycloak.url and keycloak.realm"}},
		{"provider without keycloak", `{provider: keycloak}`,
			[]string{"spec.clientRegistration.keycloak", "provider keycloak requires keycloak.url and keycloak.realm"}},
		{"unknown provider", `{provider: aws-iam}`,
			[]string{"spec.clientRegistration.provider", `supported values: "keycloak", "oidc"`}},
		{"oidc section with provider keycloak", `{provider: keycloak, keycloak: {url: "http://kc.example.com", realm: r}, oidc: {issuer: "https://idp.example.com"}}`,
			[]string{"spec.clientRegistration.oidc", "oidc is only valid with provider oidc"}},
		{"oidc section without provider", `{oidc: {issuer: "https://idp.example.com"}}`,
			[]string{"spec.clientRegistration.oidc", "oidc is only valid with provider oidc"}},
		{"keycloak section with provider oidc", `{provider: oidc, keycloak: {realm: r}}`,
			[]string{"spec.clientRegistration.keycloak", "keycloak is only valid with provider keycloak"}},
		{"oidc issuer not http", `{provider: oidc, oidc: {issuer: "ftp://idp.example.com"}}`,
			[]string{"spec.clientRegistration.oidc.issuer", "must be an http or https URL with a host"}},
		{"oidc token url", `{provider: oidc, oidc: {tokenUrl: "idp.example.com/token"}}`,
			[]string{"spec.clientRegistration.oidc.tokenUrl", "must be an http or https URL with a host"}},
		{"oidc jwks url no host", `{provider: oidc, oidc: {jwksUrl: "https://"}}`,
			[]string{"spec.clientRegistration.oidc.jwksUrl", "must be an http or https URL with a host"}},
		{"oidc registration url", `{provider: oidc, oidc: {registrationUrl: "unix:///run/idp.sock"}}`,
			[]string{"spec.clientRegistration.oidc.registrationUrl", "must be an http or https URL with a host"}},
		{"template with unknown variable", `{keycloak: {clientNameTemplate: "agent-{{.Pod}}"}}`,
			[]string{"spec.clientRegistration.keycloak.clientNameTemplate", "placeholders {{.PodName}}, {{.Namespace}}"}},
		{"template with a pipeline", `{keycloak: {clientNameTemplate: "{{.PodName | printf \"%s\"}}"}}`,
			[]string{"spec.clientRegistration.keycloak.clientNameTemplate", "functions, pipelines and variables are not supported"}},
		{"template naming another namespace's client", `{keycloak: {clientNameTemplate: "team-b/agent"}}`,
			[]string{`spec.clientRegistration.keycloak.clientNameTemplate: Invalid value: "team-b/agent": must start with {{.Namespace}} followed by '/'`}},
		{"template with the namespace after a label character", `{keycloak: {clientNameTemplate: "{{.WorkloadName}}-{{.Namespace}}"}}`,
			[]string{"spec.clientRegistration.keycloak.clientNameTemplate", "so that no two namespaces can register clients of the same name"}},
		{"template too long", `{keycloak: {clientNameTemplate: "` + strings.Repeat("a", 254) + `"}}`,
			[]string{"spec.clientRegistration.keycloak.clientNameTemplate", "Too long: may not be more than 253"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertRejected(t, ns, "clientRegistration: "+tc.spec, tc.want...)
		})
	}
	for _, tc := range []struct {
		name, spec string
		want       []string
	}{
		{"port too large", `inbound: {port: 70000}`, []string{"spec.inbound.port", "less than or equal to 65535"}},
		{"port zero", `inbound: {targetPort: 0}`, []string{"spec.inbound.targetPort", "greater than or equal to 1"}},
		{"exclude port", `outbound: {trafficInterception: {excludePorts: [0]}}`, []string{"spec.outbound.trafficInterception.excludePorts[0]", "greater than or equal to 1"}},
		{"proxy port equals inbound port", `{inbound: {port: 9000}, outbound: {trafficInterception: {proxyPort: 9000}}}`,
			[]string{"spec.outbound.trafficInterception.proxyPort", "must differ from inbound.port"}},
		{"proxy port equals default inbound port", `{inbound: {}, outbound: {trafficInterception: {proxyPort: 8080}}}`,
			[]string{"spec.outbound.trafficInterception.proxyPort", "must differ from inbound.port"}},
		{"target port equals port", `inbound: {port: 8081}`, []string{"spec.inbound.targetPort", "targetPort must differ from port"}},
		{"jwks url", `inbound: {validation: {jwksUrl: "not a url"}}`, []string{"spec.inbound.validation.jwksUrl", "must be an http or https URL"}},
		{"issuer url", `inbound: {validation: {issuer: "keycloak"}}`, []string{"spec.inbound.validation.issuer", "must be an http or https URL"}},
		{"token url", `outbound: {tokenExchange: {tokenUrl: "unix:///x"}}`, []string{"spec.outbound.tokenExchange.tokenUrl", "must be an http or https URL"}},
		{"empty host", `outbound: {tokenExchange: {destinationRules: [{match: {host: ""}}]}}`,
			[]string{"spec.outbound.tokenExchange.destinationRules[0].match.host", "at least 1 chars long"}},
		{"duplicate hosts", `outbound: {tokenExchange: {destinationRules: [{match: {host: a.example.com}}, {match: {host: b.example.com}}, {match: {host: a.example.com}}]}}`,
			[]string{"spec.outbound.tokenExchange.destinationRules", "destination rule hosts must be unique"}},
		{"bad host", `outbound: {tokenExchange: {destinationRules: [{match: {host: "http://a.example.com"}}]}}`,
			[]string{"spec.outbound.tokenExchange.destinationRules[0].match.host", "should match"}},
		{"output format", `spiffe: {outputFormat: pem}`, []string{"spec.spiffe.outputFormat", "must be jwt"}},
		{"socket path", `spiffe: {socketPath: "relative/agent.sock"}`, []string{"spec.spiffe.socketPath", "should match"}},
		// Fields that cannot take effect (docs/tokenexchange.md, "Fields that are rejected").
		{"x509 svids", `spiffe: {outputFormat: x509}`,
			[]string{`spec.spiffe.outputFormat: Invalid value: "x509": must be jwt: x509 is not supported, no injected container reads X.509 SVID files`, "set jwt or leave the field out"}},
		{"socket outside the mounted directory", `spiffe: {socketPath: "unix:///var/run/spire/agent.sock"}`,
			[]string{`spec.spiffe.socketPath: Invalid value: "unix:///var/run/spire/agent.sock": must be a socket in /run/spire/agent-sockets/, the only directory mounted into spiffe-helper`}},
		{"socket leaving the mounted directory", `spiffe: {socketPath: "/run/spire/agent-sockets/../../var/agent.sock"}`,
			[]string{`spec.spiffe.socketPath: Invalid value: "/run/spire/agent-sockets/../../var/agent.sock": must be a socket in /run/spire/agent-sockets/`}},
		{"admin credentials secret", `clientRegistration: {keycloak: {adminCredentialsSecret: keycloak-admin}}`,
			[]string{"spec.clientRegistration.keycloak.adminCredentialsSecret: Forbidden: adminCredentialsSecret is not supported",
				"from the Secret the injector mounts, kagenti-idp-credentials in the workload's namespace", "remove this field"}},
		{"proxy uid", `outbound: {trafficInterception: {proxyUid: 1337}}`,
			[]string{"spec.outbound.trafficInterception.proxyUid: Forbidden: proxyUid is not supported",
				"the proxies run as the injector's proxy UID (its identity.proxyUID, default 1337)", "Remove this field"}},
		// The authorization policy's shape (its CEL is compiled by the webhook).
		{"repeated rule name", `inbound: {authorization: {rules: [{name: a, effect: Allow, when: "true"}, {name: a, effect: Deny, when: "false"}]}}`,
			[]string{"spec.inbound.authorization.rules[1]", "Duplicate value"}},
		{"reserved rule name", `inbound: {authorization: {rules: [{name: default, effect: Allow, when: "true"}]}}`,
			[]string{"spec.inbound.authorization.rules[0].name", "default is reserved"}},
		{"rule name not a label", `inbound: {authorization: {rules: [{name: Only_Me, effect: Allow, when: "true"}]}}`,
			[]string{"spec.inbound.authorization.rules[0].name", "should match"}},
		{"rule effect", `inbound: {authorization: {rules: [{name: a, effect: allow, when: "true"}]}}`,
			[]string{"spec.inbound.authorization.rules[0].effect", `supported values: "Allow", "Deny"`}},
		{"rule without when", `inbound: {authorization: {rules: [{name: a, effect: Allow}]}}`,
			[]string{"spec.inbound.authorization.rules[0].when", "Required value"}},
		{"policy default", `inbound: {authorization: {default: deny}}`,
			[]string{"spec.inbound.authorization.default", `supported values: "Allow", "Deny"`}},
		{"chain depth", `inbound: {authorization: {maxChainDepth: 17}}`,
			[]string{"spec.inbound.authorization.maxChainDepth", "less than or equal to 16"}},
		// Mutual TLS between sidecars.
		{"mtls mode", `mtls: {mode: STRICT}`,
			[]string{"spec.mtls.mode", `supported values: "off", "permissive", "strict"`}},
		{"mtls without spiffe", `{spiffe: {enabled: false}, mtls: {mode: strict}}`,
			[]string{"spec.mtls.mode", "mtls.mode permissive or strict needs SPIFFE"}},
		// The egress policy's shape.
		{"egress default", `outbound: {egress: {default: deny}}`,
			[]string{"spec.outbound.egress.default", `supported values: "Allow", "Deny"`}},
		{"egress rule with two forms", `outbound: {egress: {allow: [{cidr: 10.0.0.0/8}, {host: a.example.com, cidr: 10.0.0.0/8}]}}`,
			[]string{"spec.outbound.egress.allow[1]", "exactly one of host, cidr and agent must be set"}},
		{"egress rule with none", `outbound: {egress: {allow: [{ports: [443]}]}}`,
			[]string{"spec.outbound.egress.allow[0]", "exactly one of host, cidr and agent must be set"}},
		{"egress cidr", `outbound: {egress: {allow: [{cidr: 10.0.0.0/33}]}}`,
			[]string{"spec.outbound.egress.allow[0].cidr", "must be a CIDR"}},
		{"egress host", `outbound: {egress: {allow: [{host: "https://api.openai.com"}]}}`,
			[]string{"spec.outbound.egress.allow[0].host", "should match"}},
		{"egress host port and ports", `outbound: {egress: {allow: [{host: "api.openai.com:443", ports: [443]}]}}`,
			[]string{"spec.outbound.egress.allow[0].ports", "name the ports in one place"}},
		{"egress port", `outbound: {egress: {allow: [{cidr: 10.0.0.0/8, ports: [443, 70000]}]}}`,
			[]string{"spec.outbound.egress.allow[0].ports[1]", "less than or equal to 65535"}},
		{"egress agent name", `outbound: {egress: {allow: [{agent: {name: Weather_Agent}}]}}`,
			[]string{"spec.outbound.egress.allow[0].agent.name", "should match"}},
		{"egress agent without name", `outbound: {egress: {allow: [{agent: {namespace: tools}}]}}`,
			[]string{"spec.outbound.egress.allow[0].agent.name", "Required value"}},
		// The external authorizer: the same patterns as the client (authz.CheckExternalAddress).
		{"external plaintext to a remote address", `inbound: {authorization: {external: {address: "opa.policy.svc:9191"}}}`,
			[]string{"spec.inbound.authorization.external.address", "plaintext only to localhost, 127.0.0.0/8, [::1] or unix:; set external.tls"}},
		{"external plaintext to a non-loopback IP", `inbound: {authorization: {external: {address: "dns:///10.0.0.7:9191"}}}`,
			[]string{"spec.inbound.authorization.external.address", "plaintext only to localhost"}},
		{"external address without port", `inbound: {authorization: {external: {address: "opa", tls: {caBundle: x}}}}`,
			[]string{"spec.inbound.authorization.external.address", "not host:port, dns:///host:port or unix:///path"}},
		{"external timeout too long", `inbound: {authorization: {external: {address: "127.0.0.1:9191", timeout: 10s}}}`,
			[]string{"spec.inbound.authorization.external.timeout", "a duration from 10ms to 5s"}},
		{"external timeout not a duration", `inbound: {authorization: {external: {address: "127.0.0.1:9191", timeout: soon}}}`,
			[]string{"spec.inbound.authorization.external.timeout", "a duration from 10ms to 5s"}},
		{"external tls without a CA bundle", `inbound: {authorization: {external: {address: "opa.policy.svc:9191", tls: {serverName: opa}}}}`,
			[]string{"spec.inbound.authorization.external.tls.caBundle", "Required value"}},
		{"target kind needs apiVersion", `targetRef: {kind: Widget, name: w}`, []string{"spec.targetRef", "apiVersion is required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertRejected(t, ns, tc.spec, tc.want...)
		})
	}
}

// TestAPIServerAgreesWithTemplateParser: the CRD's CEL rules and v1alpha1.ValidateClientNameTemplate
// with v1alpha1.ValidateNamespacedClientName (webhook, controller, sidecar) accept the same
// templates, on the real API server.
func TestAPIServerAgreesWithTemplateParser(t *testing.T) {
	ns := namespace(t)
	for _, tmpl := range []string{
		"agent-{{.PodName}}", "{{.Namespace}}/{{.WorkloadName}}", "{{ .ServiceAccount }}@x", "é-{{.PodName}}",
		"{{.Pod}}", "{{.}}", "{{$.PodName}}", "{{.PodName}}}", "{{{.PodName}}", "a b", "{{.PodName",
		"{{if .PodName}}x{{end}}", "{{- .PodName}}", "x}", "{{.PodName.Foo}}",
		"{{.Namespace}}/agent-{{.PodName}}", "{{ .Namespace }}/{{ .ServiceAccount }}@x", "{{.Namespace}}", "{{.Namespace}}.é",
		"team-b/agent", "{{.Namespace}}-{{.WorkloadName}}", "{{.Namespace}}{{.PodName}}", "x/{{.Namespace}}",
	} {
		t.Run(tmpl, func(t *testing.T) {
			te := tokenExchange(ns, "t", "agent")
			te.Labels = map[string]string{SkipWebhookLabel: "true"} // the schema alone decides
			te.Spec.ClientRegistration = &v1alpha1.ClientRegistrationSpec{Keycloak: &v1alpha1.KeycloakSpec{ClientNameTemplate: tmpl}}
			apiErr := k8s.Create(context.Background(), te, client.DryRunAll)
			parseErr := errors.Join(v1alpha1.ValidateClientNameTemplate(tmpl), v1alpha1.ValidateNamespacedClientName(tmpl))
			assert.Equal(t, parseErr == nil, apiErr == nil, "API server: %v; parser: %v", apiErr, parseErr)
		})
	}
}

// assertRejected creates a TokenExchange whose spec is targetRef + extra (YAML flow mapping
// content) and checks the API server refuses it with every fragment of want in the message.
func assertRejected(t *testing.T, ns, extra string, want ...string) {
	t.Helper()
	spec := map[string]any{}
	if extra[0] == '{' {
		require.NoError(t, yaml.Unmarshal([]byte(extra), &spec))
	} else {
		require.NoError(t, yaml.Unmarshal([]byte("{"+extra+"}"), &spec))
	}
	if _, ok := spec["targetRef"]; !ok {
		spec["targetRef"] = map[string]any{"kind": "Deployment", "name": "agent"}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kagenti.io/v1alpha1", "kind": "TokenExchange",
		// The webhook runs the same checks (Validate); skip it so that the CRD alone decides.
		"metadata": map[string]any{"generateName": "bad-", "namespace": ns, "labels": map[string]any{SkipWebhookLabel: "true"}},
		"spec":     spec,
	}}
	err := k8s.Create(context.Background(), u)
	require.Error(t, err, "spec %s was accepted", extra)
	assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
	t.Logf("rejected: %v", err)
	for _, w := range want {
		assert.Contains(t, err.Error(), w)
	}
}

// TestAPIServerAcceptsAnEgressPolicy: the example of docs/authorization.md ("Egress policy") is a
// valid spec, with every rule form.
func TestAPIServerAcceptsAnEgressPolicy(t *testing.T) {
	ns := namespace(t)
	te := tokenExchange(ns, "egress", "agent")
	te.Labels = map[string]string{SkipWebhookLabel: "true"} // the schema alone decides
	te.Spec.Outbound = &v1alpha1.OutboundSpec{Egress: &v1alpha1.EgressSpec{Default: "Deny", Allow: []v1alpha1.EgressRule{
		{Agent: &v1alpha1.EgressAgent{Name: "weather-agent"}},
		{Agent: &v1alpha1.EgressAgent{Name: "search", Namespace: "tools"}, Ports: []int32{8080}},
		{Host: "api.openai.com", Ports: []int32{443}},
		{Host: "*.googleapis.com:443"},
		{CIDR: "10.96.0.10/32", Ports: []int32{53}},
		{CIDR: "2001:db8::/32"},
	}}}
	require.NoError(t, k8s.Create(context.Background(), te, client.DryRunAll))
}

// The external authorizers the client accepts are accepted by the API server's CEL rules too.
func TestAPIServerAcceptsTheExternalAuthorizersTheClientAccepts(t *testing.T) {
	ns := namespace(t)
	for _, ext := range []map[string]any{
		{"address": "127.0.0.1:9191"},
		{"address": "localhost:9191", "timeout": "250ms", "failOpen": true},
		{"address": "[::1]:9191", "timeout": "1.5s"},
		{"address": "dns:///localhost:9191"},
		{"address": "unix:///run/opa/opa.sock"},
		{"address": "dns:///opa.policy.svc:9191", "tls": map[string]any{"caBundle": "-----BEGIN CERTIFICATE-----", "serverName": "opa.policy.svc"}},
	} {
		require.NoError(t, authz.CheckExternalAddress(ext["address"].(string), ext["tls"] != nil))
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kagenti.io/v1alpha1", "kind": "TokenExchange",
			"metadata": map[string]any{"generateName": "ext-", "namespace": ns, "labels": map[string]any{SkipWebhookLabel: "true"}},
			"spec": map[string]any{"targetRef": map[string]any{"kind": "Deployment", "name": "agent"},
				"inbound": map[string]any{"authorization": map[string]any{"external": ext}}},
		}}
		assert.NoError(t, k8s.Create(context.Background(), u), "%v", ext)
	}
}

// TestAPIServerAcceptsTheMTLSModes: every mode is a valid spec, SPIFFE left to the injector.
func TestAPIServerAcceptsTheMTLSModes(t *testing.T) {
	ns := namespace(t)
	for _, mode := range []string{v1alpha1.MTLSOff, v1alpha1.MTLSPermissive, v1alpha1.MTLSStrict} {
		te := tokenExchange(ns, "mtls-"+mode, "agent")
		te.Labels = map[string]string{SkipWebhookLabel: "true"} // the schema alone decides
		te.Spec.MTLS = &v1alpha1.MTLSSpec{Mode: mode}
		require.NoError(t, k8s.Create(context.Background(), te, client.DryRunAll), mode)
	}
}
