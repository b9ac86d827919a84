package resources

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
)

// Target is what rendering needs to know about the workload: its identity, for the defaults that
// derive from it (the SPIFFE ID is the default inbound audience).
type Target struct {
	Kind           string
	Name           string
	Namespace      string
	ServiceAccount string
}

// SpiffeID is the workload's SPIFFE ID under the SPIRE Kubernetes workload registrar's convention.
func (t Target) SpiffeID(trustDomain string) string {
	sa := t.ServiceAccount
	if sa == "" {
		sa = "default"
	}
	return fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", trustDomain, t.Namespace, sa)
}

// Config is config.yaml: the fully resolved identity configuration, every field set.
type Config struct {
	Workload           WorkloadConfig           `json:"workload"`
	Spiffe             SpiffeConfig             `json:"spiffe"`
	ClientRegistration ClientRegistrationConfig `json:"clientRegistration"`
	Inbound            InboundConfig            `json:"inbound"`
	Outbound           OutboundConfig           `json:"outbound"`
}

type WorkloadConfig struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	SpiffeID  string `json:"spiffeId"`
}

type SpiffeConfig struct {
	Enabled      bool   `json:"enabled"`
	TrustDomain  string `json:"trustDomain"`
	SocketPath   string `json:"socketPath"`
	OutputFormat string `json:"outputFormat"`
	Audience     string `json:"audience"`
}

type ClientRegistrationConfig struct {
	Enabled  bool           `json:"enabled"`
	Provider string         `json:"provider"`
	Keycloak KeycloakConfig `json:"keycloak"`
}

type KeycloakConfig struct {
	URL                    string `json:"url"`
	Realm                  string `json:"realm"`
	AdminCredentialsSecret string `json:"adminCredentialsSecret,omitempty"`
	ClientNameTemplate     string `json:"clientNameTemplate"`
	TokenExchangeEnabled   bool   `json:"tokenExchangeEnabled"`
}

type InboundConfig struct {
	Enabled    bool             `json:"enabled"`
	Port       int32            `json:"port"`
	TargetPort int32            `json:"targetPort"`
	Validation ValidationConfig `json:"validation"`
}

type ValidationConfig struct {
	Enabled        bool     `json:"enabled"`
	Issuer         string   `json:"issuer"`
	JWKSURL        string   `json:"jwksUrl"`
	Audience       string   `json:"audience"`
	RequiredScopes []string `json:"requiredScopes"`
}

type OutboundConfig struct {
	Enabled             bool                      `json:"enabled"`
	TrafficInterception TrafficInterceptionConfig `json:"trafficInterception"`
	TokenExchange       TokenExchangeConfig       `json:"tokenExchange"`
}

type TrafficInterceptionConfig struct {
	Enabled      bool    `json:"enabled"`
	ProxyPort    int32   `json:"proxyPort"`
	ProxyUID     int64   `json:"proxyUid"`
	ExcludePorts []int32 `json:"excludePorts"`
}

type TokenExchangeConfig struct {
	Enabled          bool         `json:"enabled"`
	TokenURL         string       `json:"tokenUrl"`
	DefaultTarget    TargetConfig `json:"defaultTarget"`
	DestinationRules []RuleConfig `json:"destinationRules"`
}

type TargetConfig struct {
	Audience string   `json:"audience"`
	Scopes   []string `json:"scopes"`
}

type RuleConfig struct {
	Host string `json:"host"`
	// Target is nil for a pass-through rule.
	Target *TargetConfig `json:"target"`
}

// ResolveConfig merges the spec of te over d for the workload t. It is total: every field of the
// result is set, either from the spec or from the defaults (or derived from other resolved fields,
// like the Keycloak endpoints from the resolved URL and realm).
func ResolveConfig(te *v1alpha1.TokenExchange, t Target, d Defaults) Config {
	s := te.Spec
	c := Config{Workload: WorkloadConfig{Kind: t.Kind, Name: t.Name, Namespace: t.Namespace}}

	sp := deref(s.Spiffe)
	c.Spiffe = SpiffeConfig{
		Enabled:      boolOr(sp.Enabled, true),
		TrustDomain:  or(sp.TrustDomain, d.TrustDomain),
		SocketPath:   strings.TrimPrefix(or(sp.SocketPath, d.SocketPath), "unix://"),
		OutputFormat: or(sp.OutputFormat, d.OutputFormat),
		Audience:     or(sp.Audience, d.JWTAudience),
	}
	c.Workload.SpiffeID = t.SpiffeID(c.Spiffe.TrustDomain)

	cr := deref(s.ClientRegistration)
	kc := deref(cr.Keycloak)
	c.ClientRegistration = ClientRegistrationConfig{
		Enabled:  boolOr(cr.Enabled, true),
		Provider: or(cr.Provider, v1alpha1.ProviderKeycloak),
		Keycloak: KeycloakConfig{
			URL:                    strings.TrimSuffix(or(kc.URL, d.KeycloakURL), "/"),
			Realm:                  or(kc.Realm, d.KeycloakRealm),
			AdminCredentialsSecret: kc.AdminCredentialsSecret,
			ClientNameTemplate:     or(kc.ClientNameTemplate, d.ClientNameTemplate),
			TokenExchangeEnabled:   boolOr(kc.TokenExchangeEnabled, d.TokenExchangeEnabled),
		},
	}
	realmURL := c.ClientRegistration.Keycloak.URL + "/realms/" + c.ClientRegistration.Keycloak.Realm

	in := deref(s.Inbound)
	v := deref(in.Validation)
	audience := or(v.Audience, c.Workload.SpiffeID)
	if audience == "self" {
		audience = c.Workload.SpiffeID
	}
	c.Inbound = InboundConfig{
		Enabled:    boolOr(in.Enabled, true),
		Port:       int32Or(in.Port, d.InboundPort),
		TargetPort: int32Or(in.TargetPort, d.InboundTargetPort),
		Validation: ValidationConfig{
			Enabled:        boolOr(v.Enabled, true),
			Issuer:         or(v.Issuer, realmURL),
			JWKSURL:        or(v.JWKSURL, realmURL+"/protocol/openid-connect/certs"),
			Audience:       audience,
			RequiredScopes: nonNil(v.RequiredScopes),
		},
	}

	out := deref(s.Outbound)
	ti := deref(out.TrafficInterception)
	tx := deref(out.TokenExchange)
	def := TargetConfig{Audience: d.DefaultAudience, Scopes: []string{}}
	if tx.DefaultTarget != nil {
		def = TargetConfig{Audience: or(tx.DefaultTarget.Audience, d.DefaultAudience), Scopes: nonNil(tx.DefaultTarget.Scopes)}
	}
	c.Outbound = OutboundConfig{
		Enabled: boolOr(out.Enabled, true),
		TrafficInterception: TrafficInterceptionConfig{
			Enabled:   boolOr(ti.Enabled, true),
			ProxyPort: int32Or(ti.ProxyPort, d.OutboundProxyPort),
			ProxyUID:  int64Or(ti.ProxyUID, d.ProxyUID),
			// The inbound port is always excluded, or inbound replies would loop through the proxy.
			ExcludePorts: sortedUnion(ti.ExcludePorts, c.Inbound.Port),
		},
		TokenExchange: TokenExchangeConfig{
			Enabled:          boolOr(tx.Enabled, true),
			TokenURL:         or(tx.TokenURL, realmURL+"/protocol/openid-connect/token"),
			DefaultTarget:    def,
			DestinationRules: make([]RuleConfig, 0, len(tx.DestinationRules)),
		},
	}
	for _, r := range tx.DestinationRules {
		rc := RuleConfig{Host: r.Match.Host}
		if r.Target != nil {
			rc.Target = &TargetConfig{Audience: or(r.Target.Audience, def.Audience), Scopes: def.Scopes}
			if len(r.Target.Scopes) > 0 {
				rc.Target.Scopes = r.Target.Scopes
			}
		}
		c.Outbound.TokenExchange.DestinationRules = append(c.Outbound.TokenExchange.DestinationRules, rc)
	}
	return c
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

func int32Or(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

func int64Or(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func sortedUnion(ports []int32, always int32) []int32 {
	out := append([]int32{always}, ports...)
	slices.Sort(out)
	return slices.Compact(out)
}
