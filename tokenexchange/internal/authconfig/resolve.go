package authconfig

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kagenti/platform/pkg/configmap/identity"

	"github.com/kagenti/platform/pkg/configmap/authz"
)

// Resolve merges overrides (config.yaml) over defaults (the injector's environment) for the
// workload w, fills in what derives from other fields (the Keycloak endpoints, the SPIFFE ID as
// inbound audience, the client name) and checks the result. The error lists every problem, each
// with its field path.
func Resolve(defaults, overrides Spec, w Workload) (Config, error) {
	s := Merge(defaults, overrides)
	notInjected := switchedOnWithoutContainer(defaults, overrides)
	sp, cr, in, out := value(s.Spiffe), value(s.ClientRegistration), value(s.Inbound), value(s.Outbound)
	kc, oidc := value(cr.Keycloak), value(cr.OIDC)
	v, az := value(in.Validation), value(in.Authorization)
	ti, tx := value(out.TrafficInterception), value(out.TokenExchange)

	c := Config{Workload: w}
	c.Spiffe = Spiffe{
		Enabled:      enabled(sp.Enabled),
		TrustDomain:  sp.TrustDomain,
		SocketPath:   strings.TrimPrefix(sp.SocketPath, "unix://"),
		OutputFormat: str(OutputJWT, sp.OutputFormat),
		Audience:     sp.Audience,
	}
	c.SpiffeID = w.SpiffeID(c.Spiffe.TrustDomain)

	c.IdP = IdP{Provider: str(ProviderKeycloak, cr.Provider)}
	switch c.IdP.Provider {
	case ProviderKeycloak:
		c.IdP.KeycloakURL = strings.TrimSuffix(kc.URL, "/")
		c.IdP.Realm = kc.Realm
		if c.IdP.KeycloakURL != "" && c.IdP.Realm != "" {
			c.IdP.Issuer = c.IdP.KeycloakURL + "/realms/" + url.PathEscape(c.IdP.Realm)
			c.IdP.TokenURL = c.IdP.Issuer + "/protocol/openid-connect/token"
			c.IdP.JWKSURL = c.IdP.Issuer + "/protocol/openid-connect/certs"
		}
	case ProviderOIDC:
		c.IdP.Issuer, c.IdP.TokenURL, c.IdP.JWKSURL = oidc.Issuer, oidc.TokenURL, oidc.JWKSURL
		c.IdP.RegistrationURL = oidc.RegistrationURL
	}

	c.ClientRegistration = ClientRegistration{
		Enabled:              enabled(cr.Enabled),
		ClientAuthentication: str(ClientAuthClientSecret, cr.ClientAuthentication),
		ClientID:             cr.ClientID,
		ClientNameTemplate:   kc.ClientNameTemplate,
		TokenExchangeEnabled: enabled(kc.TokenExchangeEnabled),
	}

	audience := v.Audience
	if audience == "" || audience == "self" {
		audience = c.SpiffeID
	}
	c.Inbound = Inbound{
		Enabled:      enabled(in.Enabled),
		Port:         value(in.Port),
		TargetPort:   value(in.TargetPort),
		ExcludePorts: nonNil(in.ExcludePorts),
		Validation: Validation{
			Enabled:        enabled(v.Enabled),
			Issuer:         str(c.IdP.Issuer, v.Issuer),
			JWKSURL:        str(c.IdP.JWKSURL, v.JWKSURL),
			Audience:       audience,
			RequiredScopes: nonNil(v.RequiredScopes),
			// The data plane's default when neither config.yaml nor the injector sets one.
			JWKSRefreshSeconds: valueOr(v.JWKSRefreshSeconds, identity.JWKSRefreshSeconds),
		},
		Authorization: Authorization{
			Rules:         nonNil(az.Rules),
			Default:       az.Default,
			DryRun:        value(az.DryRun),
			MaxChainDepth: valueOr(az.MaxChainDepth, authz.DefaultMaxChainDepth),
		},
	}
	if e := az.External; e != nil {
		c.Inbound.Authorization.External = &External{Address: e.Address, Timeout: authz.DefaultExternalTimeout, FailOpen: value(e.FailOpen)}
		if e.Timeout != "" {
			d, err := time.ParseDuration(e.Timeout)
			if err != nil {
				return Config{}, fmt.Errorf("inbound.authorization.external.timeout: %q is not a duration (200ms, 1s)", e.Timeout)
			}
			c.Inbound.Authorization.External.Timeout = d
		}
		if e.TLS != nil {
			c.Inbound.Authorization.External.TLS = &ExternalTLS{CABundle: e.TLS.CABundle, ServerName: e.TLS.ServerName}
		}
	}
	if c.Inbound.Authorization.Default == "" {
		c.Inbound.Authorization.Default = string(authz.DefaultEffect(c.Inbound.Authorization.AuthzRules()))
	}

	def := Target{Scopes: []string{}}
	if tx.DefaultTarget != nil {
		def = Target{Audience: tx.DefaultTarget.Audience, Scopes: nonNil(tx.DefaultTarget.Scopes),
			AllowScopeEscalation: value(tx.DefaultTarget.AllowScopeEscalation)}
	}
	c.Outbound = Outbound{
		Enabled: enabled(out.Enabled),
		Interception: Interception{
			Enabled:      enabled(ti.Enabled),
			ProxyPort:    value(ti.ProxyPort),
			ProxyUID:     value(ti.ProxyUID),
			ExcludePorts: nonNil(ti.ExcludePorts),
		},
		TokenExchange: TokenExchange{
			Enabled:       enabled(tx.Enabled),
			TokenURL:      str(c.IdP.TokenURL, tx.TokenURL),
			Delegation:    str(DelegationImmediateCaller, tx.Delegation),
			DefaultTarget: def,
			Routes:        make([]Route, 0, len(tx.DestinationRules)),
		},
	}
	for _, r := range tx.DestinationRules {
		route := Route{Host: r.Match.Host, Passthrough: r.Target == nil, Target: Target{Scopes: []string{}}}
		if r.Target != nil {
			route.Target = Target{Audience: str(def.Audience, r.Target.Audience), Scopes: def.Scopes,
				AllowScopeEscalation: valueOr(r.Target.AllowScopeEscalation, def.AllowScopeEscalation)}
			if len(r.Target.Scopes) > 0 {
				route.Target.Scopes = r.Target.Scopes
			}
		}
		c.Outbound.TokenExchange.Routes = append(c.Outbound.TokenExchange.Routes, route)
	}

	c.Outbound.Egress = resolveEgress(value(out.Egress), w.Namespace)

	c.MTLS = MTLS{Mode: MTLSOff}
	if m := value(s.MTLS); m.Mode != "" {
		c.MTLS.Mode = m.Mode
	}

	errs := append(c.validate(), notInjected...)
	errs = append(errs, c.validateMTLS()...)
	errs = append(errs, validateEgress(value(out.Egress))...)
	if c.ClientRegistration.ClientNameTemplate != "" {
		name, err := RenderClientName(c.ClientRegistration.ClientNameTemplate, w)
		if err != nil {
			errs = append(errs, fmt.Errorf("clientRegistration.keycloak.clientNameTemplate: %w", err))
		}
		c.ClientRegistration.ClientName = name
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return c, errors.Join(errs...)
}

var (
	trustDomainPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$`)
	hostPattern        = regexp.MustCompile(`^[A-Za-z0-9*]([-A-Za-z0-9.*]*[A-Za-z0-9*])?(:[0-9]{1,5})?$`)
	scopePattern       = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]+$`) // RFC 6749 §3.3 scope-token
)

// validate checks what each enabled part needs. Messages name the field of config.yaml; a
// default that is missing altogether names the environment variable the injector sets.
func (c Config) validate() []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	required := func(path, v string) bool {
		if v == "" {
			add(path, "required (not set in config.yaml, and the default %s is not set)", envOf(path))
			return false
		}
		return true
	}
	httpURL := func(path, v string) {
		if !required(path, v) {
			return
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add(path, "%q is not an http(s) URL with a host", v)
		}
	}
	port := func(path string, p int32) {
		if p < 1 || p > 65535 {
			add(path, "%d is not a port (1-65535; default %s)", p, envOf(path))
		}
	}
	ports := func(path string, ps []int32) {
		for i, p := range ps {
			if p < 1 || p > 65535 {
				add(fmt.Sprintf("%s[%d]", path, i), "%d is not a port (1-65535)", p)
			}
		}
	}
	scopes := func(path string, ss []string) {
		for i, s := range ss {
			if !scopePattern.MatchString(s) {
				add(fmt.Sprintf("%s[%d]", path, i), "%q is not an OAuth scope token", s)
			}
		}
	}

	if c.Workload.Namespace == "" {
		add("workload.namespace", "required (environment variable %s, from the downward API)", EnvPodNamespace)
	}
	if c.Spiffe.TrustDomain == "" {
		required("spiffe.trustDomain", "")
	} else if !trustDomainPattern.MatchString(c.Spiffe.TrustDomain) || len(c.Spiffe.TrustDomain) > 255 {
		add("spiffe.trustDomain", "%q is not a trust domain (lower-case letters, digits, '.', '-', '_')", c.Spiffe.TrustDomain)
	}
	if c.Spiffe.Enabled {
		// Absolute only: in a pod the socket is in SpireSocketDir (the TokenExchange API and the
		// injector's configuration both insist on it), but the roles also run outside pods.
		if required("spiffe.socketPath", c.Spiffe.SocketPath) && !strings.HasPrefix(c.Spiffe.SocketPath, "/") {
			add("spiffe.socketPath", "%q is not an absolute path", c.Spiffe.SocketPath)
		}
		if c.Spiffe.OutputFormat != OutputJWT {
			add("spiffe.outputFormat", "%q is not supported: only jwt (no container reads X.509 SVID files)", c.Spiffe.OutputFormat)
		}
		required("spiffe.audience", c.Spiffe.Audience)
	}

	if d := c.Outbound.TokenExchange.Delegation; d != DelegationChained && d != DelegationImmediateCaller {
		add("outbound.tokenExchange.delegation", "%q is not chained or immediateCaller", d)
	}

	switch c.IdP.Provider {
	case ProviderKeycloak:
		httpURL("clientRegistration.keycloak.url", c.IdP.KeycloakURL)
		if required("clientRegistration.keycloak.realm", c.IdP.Realm) && strings.ContainsAny(c.IdP.Realm, "/ \t\n") {
			add("clientRegistration.keycloak.realm", "%q must not contain '/' or whitespace", c.IdP.Realm)
		}
	case ProviderOIDC:
		// Endpoints are checked where they are used, below; registration needs its own.
		if c.ClientRegistration.Enabled {
			httpURL("clientRegistration.oidc.registrationUrl", c.IdP.RegistrationURL)
		}
	default:
		add("clientRegistration.provider", "%q is not one of keycloak, oidc", c.IdP.Provider)
	}
	switch c.ClientRegistration.ClientAuthentication {
	case ClientAuthClientSecret:
	case ClientAuthJWTSVID:
		if c.ClientRegistration.Enabled && !c.Spiffe.Enabled {
			add("clientRegistration.clientAuthentication", "jwtSVID needs SPIFFE (label the workload kagenti.io/spiffe=enabled): the client authenticates with the workload's JWT SVID")
		}
		if c.ClientRegistration.Enabled && c.IdP.Provider != ProviderOIDC {
			add("clientRegistration.clientAuthentication", "jwtSVID needs provider oidc (RFC 7591 registration by kagenti-tokenexchange), not %q", c.IdP.Provider)
		}
	default:
		add("clientRegistration.clientAuthentication", "%q is not clientSecret or jwtSVID", c.ClientRegistration.ClientAuthentication)
	}
	if c.ClientRegistration.Enabled {
		if c.Workload.Name == "" {
			add("workload.name", "required by client registration, for the client's name and its owner marker (environment variable %s)", EnvWorkload)
		}
		if required("clientRegistration.keycloak.clientNameTemplate", c.ClientRegistration.ClientNameTemplate) {
			if err := identity.ValidateNamespacedClientName(c.ClientRegistration.ClientNameTemplate); err != nil {
				add("clientRegistration.keycloak.clientNameTemplate", "%q %v", c.ClientRegistration.ClientNameTemplate, err)
			}
			if strings.Contains(c.ClientRegistration.ClientNameTemplate, "PodName") && c.Workload.PodName == "" {
				add("workload.podName", "required by the client name template (environment variable %s)", EnvPodName)
			}
		}
	}

	port("inbound.port", c.Inbound.Port)
	port("inbound.targetPort", c.Inbound.TargetPort)
	if c.Inbound.Port == c.Inbound.TargetPort && c.Inbound.Port != 0 {
		add("inbound.targetPort", "must differ from inbound.port (%d)", c.Inbound.Port)
	}
	ports("inbound.excludePorts", c.Inbound.ExcludePorts)
	if c.Inbound.Enabled && c.Inbound.Validation.Enabled {
		httpURL("inbound.validation.issuer", c.Inbound.Validation.Issuer)
		httpURL("inbound.validation.jwksUrl", c.Inbound.Validation.JWKSURL)
		scopes("inbound.validation.requiredScopes", c.Inbound.Validation.RequiredScopes)
		if r := c.Inbound.Validation.JWKSRefreshSeconds; r < 10 || r > 86400 {
			add("inbound.validation.jwksRefreshSeconds", "%d is not 10 to 86400 seconds (default %s)", r, envOf("inbound.validation.jwksRefreshSeconds"))
		}
	}
	errs = append(errs, validateAuthorization(c.Inbound.Authorization)...)

	port("outbound.trafficInterception.proxyPort", c.Outbound.Interception.ProxyPort)
	if c.Outbound.Interception.ProxyPort == c.Inbound.Port && c.Inbound.Port != 0 {
		add("outbound.trafficInterception.proxyPort", "must differ from inbound.port (%d)", c.Inbound.Port)
	}
	if c.Outbound.Interception.ProxyUID < 1 {
		add("outbound.trafficInterception.proxyUid", "%d must be a non-root UID (default %s)", c.Outbound.Interception.ProxyUID, envOf("outbound.trafficInterception.proxyUid"))
	}
	ports("outbound.trafficInterception.excludePorts", c.Outbound.Interception.ExcludePorts)
	if c.Exchanges() {
		if !c.ClientRegistration.Enabled && !c.Spiffe.Enabled {
			add("outbound.tokenExchange.enabled", "token exchange needs the workload's credentials: enable clientRegistration (client secret) or spiffe (JWT SVID as client assertion)")
		}
		tx := c.Outbound.TokenExchange
		httpURL("outbound.tokenExchange.tokenUrl", tx.TokenURL)
		required("outbound.tokenExchange.defaultTarget.audience", tx.DefaultTarget.Audience)
		scopes("outbound.tokenExchange.defaultTarget.scopes", tx.DefaultTarget.Scopes)
	}
	seen := map[string]int{}
	for i, r := range c.Outbound.TokenExchange.Routes {
		path := fmt.Sprintf("outbound.tokenExchange.destinationRules[%d].match.host", i)
		if !hostPattern.MatchString(r.Host) || len(r.Host) > 253 {
			add(path, "%q is not a host pattern (letters, digits, '-', '.', '*', optional :port)", r.Host)
		}
		if j, dup := seen[r.Host]; dup {
			add(path, "%q repeats destinationRules[%d]", r.Host, j)
		}
		seen[r.Host] = i
		scopes(fmt.Sprintf("outbound.tokenExchange.destinationRules[%d].target.scopes", i), r.Target.Scopes)
	}
	return errs
}

// validate compiles the policy as the inbound proxy will (authz.Compile), so that a policy the
// proxy could not run is refused with the configuration that carries it.
func validateAuthorization(a Authorization) []error {
	var errs []error
	if d := a.MaxChainDepth; d < 1 || d > MaxChainDepth {
		errs = append(errs, fmt.Errorf("inbound.authorization.maxChainDepth: %d is not 1 to %d", d, MaxChainDepth))
	}
	if e := a.External; e != nil {
		if err := authz.CheckExternalAddress(e.Address, e.TLS != nil); err != nil {
			errs = append(errs, fmt.Errorf("inbound.authorization.%w", err))
		}
		if err := authz.CheckExternalTimeout(e.Timeout); err != nil {
			errs = append(errs, fmt.Errorf("inbound.authorization.%w", err))
		}
		if e.TLS != nil {
			if _, err := e.TLS.CertPool(); err != nil {
				errs = append(errs, fmt.Errorf("inbound.authorization.external.tls.caBundle: %w", err))
			}
		}
	}
	if _, err := authz.Compile(a.AuthzRules(), authz.Effect(a.Default)); err != nil {
		for _, e := range unjoin(err) {
			errs = append(errs, fmt.Errorf("inbound.authorization.%w", e))
		}
	}
	return errs
}

// MaxChainDepth is the largest inbound.authorization.maxChainDepth: the chain length the rules'
// static costs are estimated for (authz.MaxChainDepth).
const MaxChainDepth = authz.MaxChainDepth

// unjoin returns the errors err joins, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// A part's enabled switch in config.yaml can switch off a container the injector put into the pod
// (at once, and its traffic redirect at the next pod start), but not add one it left out: the
// injector sets the part's default to false exactly when it excluded the container. Switching it
// on there would, at the next pod start, redirect traffic to a proxy that does not exist (inbound,
// outbound) or make the outbound proxy wait for credentials nobody writes, so it is an error
// (config.yaml rejected, reported on /readyz and in the TokenExchange's ConfigPropagated).
var partSwitches = []struct {
	path, container string
	get             func(Spec) *bool
}{
	{"spiffe.enabled", "spiffe-helper", func(s Spec) *bool { return value(s.Spiffe).Enabled }},
	{"clientRegistration.enabled", "client-registration", func(s Spec) *bool { return value(s.ClientRegistration).Enabled }},
	{"inbound.enabled", "auth-proxy", func(s Spec) *bool { return value(s.Inbound).Enabled }},
	{"outbound.enabled", "envoy-proxy", func(s Spec) *bool { return value(s.Outbound).Enabled }},
}

func switchedOnWithoutContainer(defaults, overrides Spec) []error {
	var errs []error
	for _, p := range partSwitches {
		def, over := p.get(defaults), p.get(overrides)
		if def != nil && !*def && over != nil && *over {
			errs = append(errs, fmt.Errorf("%s: true cannot take effect: the injector did not put %s into this pod (%s=false); remove the field, or re-inject the workload without excluding %s",
				p.path, p.container, envOf(p.path), p.container))
		}
	}
	return errs
}

// InSpireSocketDir reports whether path (no scheme) names a file inside SpireSocketDir, without
// "." or ".." segments that could leave it: where a TokenExchange may point spiffe-helper (the
// API's rule; the injector's configuration checks its default the same way).
func InSpireSocketDir(path string) bool {
	rest, ok := strings.CutPrefix(path, SpireSocketDir+"/")
	if !ok || rest == "" {
		return false
	}
	for seg := range strings.SplitSeq(rest, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

func enabled(p *bool) bool { return p == nil || *p }

func valueOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return slices.Clone(s)
}
