package authconfig

import "slices"

// Merge returns over laid over base: a field set in over wins, a field over leaves out keeps
// base's value. Lists replace, except the two port-exclusion lists, which are unioned: a port the
// workload's annotation excludes from interception stays excluded whatever a TokenExchange says.
// Neither argument is modified.
func Merge(base, over Spec) Spec {
	return Spec{
		Spiffe:             mergeSpiffe(base.Spiffe, over.Spiffe),
		ClientRegistration: mergeClientRegistration(base.ClientRegistration, over.ClientRegistration),
		Inbound:            mergeInbound(base.Inbound, over.Inbound),
		Outbound:           mergeOutbound(base.Outbound, over.Outbound),
	}
}

func mergeSpiffe(b, o *SpiffeSpec) *SpiffeSpec {
	if b == nil && o == nil {
		return nil
	}
	x, y := value(b), value(o)
	return &SpiffeSpec{
		Enabled:      pick(x.Enabled, y.Enabled),
		TrustDomain:  str(x.TrustDomain, y.TrustDomain),
		SocketPath:   str(x.SocketPath, y.SocketPath),
		OutputFormat: str(x.OutputFormat, y.OutputFormat),
		Audience:     str(x.Audience, y.Audience),
	}
}

func mergeClientRegistration(b, o *ClientRegistrationSpec) *ClientRegistrationSpec {
	if b == nil && o == nil {
		return nil
	}
	x, y := value(b), value(o)
	return &ClientRegistrationSpec{
		Enabled:  pick(x.Enabled, y.Enabled),
		Provider: str(x.Provider, y.Provider),
		Keycloak: mergeKeycloak(x.Keycloak, y.Keycloak),
		OIDC:     mergeOIDC(x.OIDC, y.OIDC),
	}
}

func mergeKeycloak(b, o *KeycloakSpec) *KeycloakSpec {
	if b == nil && o == nil {
		return nil
	}
	x, y := value(b), value(o)
	return &KeycloakSpec{
		URL:                  str(x.URL, y.URL),
		Realm:                str(x.Realm, y.Realm),
		ClientNameTemplate:   str(x.ClientNameTemplate, y.ClientNameTemplate),
		TokenExchangeEnabled: pick(x.TokenExchangeEnabled, y.TokenExchangeEnabled),
	}
}

func mergeOIDC(b, o *OIDCSpec) *OIDCSpec {
	if b == nil && o == nil {
		return nil
	}
	x, y := value(b), value(o)
	return &OIDCSpec{
		Issuer:          str(x.Issuer, y.Issuer),
		TokenURL:        str(x.TokenURL, y.TokenURL),
		JWKSURL:         str(x.JWKSURL, y.JWKSURL),
		RegistrationURL: str(x.RegistrationURL, y.RegistrationURL),
	}
}

func mergeInbound(b, o *InboundSpec) *InboundSpec {
	if b == nil && o == nil {
		return nil
	}
	x, y := value(b), value(o)
	return &InboundSpec{
		Enabled:      pick(x.Enabled, y.Enabled),
		Port:         pick(x.Port, y.Port),
		TargetPort:   pick(x.TargetPort, y.TargetPort),
		Validation:   mergeValidation(x.Validation, y.Validation),
		ExcludePorts: union(x.ExcludePorts, y.ExcludePorts),
	}
}

func mergeValidation(b, o *ValidationSpec) *ValidationSpec {
	if b == nil && o == nil {
		return nil
	}
	x, y := value(b), value(o)
	return &ValidationSpec{
		Enabled:        pick(x.Enabled, y.Enabled),
		Issuer:         str(x.Issuer, y.Issuer),
		JWKSURL:        str(x.JWKSURL, y.JWKSURL),
		Audience:       str(x.Audience, y.Audience),
		RequiredScopes: list(x.RequiredScopes, y.RequiredScopes),
	}
}

func mergeOutbound(b, o *OutboundSpec) *OutboundSpec {
	if b == nil && o == nil {
		return nil
	}
	x, y := value(b), value(o)
	return &OutboundSpec{
		Enabled:             pick(x.Enabled, y.Enabled),
		TrafficInterception: mergeInterception(x.TrafficInterception, y.TrafficInterception),
		TokenExchange:       mergeTokenExchange(x.TokenExchange, y.TokenExchange),
	}
}

func mergeInterception(b, o *TrafficInterceptionSpec) *TrafficInterceptionSpec {
	if b == nil && o == nil {
		return nil
	}
	x, y := value(b), value(o)
	return &TrafficInterceptionSpec{
		Enabled:      pick(x.Enabled, y.Enabled),
		ProxyPort:    pick(x.ProxyPort, y.ProxyPort),
		ProxyUID:     pick(x.ProxyUID, y.ProxyUID),
		ExcludePorts: union(x.ExcludePorts, y.ExcludePorts),
	}
}

func mergeTokenExchange(b, o *TokenExchangeSpec) *TokenExchangeSpec {
	if b == nil && o == nil {
		return nil
	}
	x, y := value(b), value(o)
	return &TokenExchangeSpec{
		Enabled:          pick(x.Enabled, y.Enabled),
		TokenURL:         str(x.TokenURL, y.TokenURL),
		DefaultTarget:    mergeTarget(x.DefaultTarget, y.DefaultTarget),
		DestinationRules: cloneRules(list(x.DestinationRules, y.DestinationRules)),
	}
}

func mergeTarget(b, o *ExchangeTarget) *ExchangeTarget {
	if b == nil && o == nil {
		return nil
	}
	x, y := value(b), value(o)
	return &ExchangeTarget{Audience: str(x.Audience, y.Audience), Scopes: list(x.Scopes, y.Scopes)}
}

// cloneRules copies the rules' targets too, so that a merged Spec shares no memory with its inputs.
func cloneRules(rules []DestinationRule) []DestinationRule {
	for i, r := range rules {
		if r.Target != nil {
			rules[i].Target = &ExchangeTarget{Audience: r.Target.Audience, Scopes: slices.Clone(r.Target.Scopes)}
		}
	}
	return rules
}

func value[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// pick returns over when set, else base; the result never aliases base's or over's memory.
func pick[T any](base, over *T) *T {
	if over != nil {
		v := *over
		return &v
	}
	if base != nil {
		v := *base
		return &v
	}
	return nil
}

func str(base, over string) string {
	if over != "" {
		return over
	}
	return base
}

// list returns over when set (an empty but non-nil list is set: it clears base), else base.
func list[T any](base, over []T) []T {
	if over != nil {
		return slices.Clone(over)
	}
	return slices.Clone(base)
}

// union returns the sorted, de-duplicated union; nil when both are nil.
func union(base, over []int32) []int32 {
	if base == nil && over == nil {
		return nil
	}
	out := append(slices.Clone(base), over...)
	slices.Sort(out)
	return slices.Compact(out)
}
