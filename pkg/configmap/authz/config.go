package authz

import (
	"crypto/x509"
	"errors"
	"time"
)

// Spec is inbound.authorization as a TokenExchange sets it and the tokenexchange controller
// writes it into config.yaml of ConfigMap {workload}-token-exchange: every field optional.
type Spec struct {
	Rules []RuleConfig `json:"rules,omitempty"`
	// Default is Allow or Deny; when empty, Deny if a rule allows, else Allow.
	Default       string `json:"default,omitempty"`
	DryRun        *bool  `json:"dryRun,omitempty"`
	MaxChainDepth *int32 `json:"maxChainDepth,omitempty"`
	// External is an ext_authz gRPC authorizer asked after the rules allow.
	External *ExternalSpec `json:"external,omitempty"`
}

// ExternalSpec is an external authorizer (Envoy's ext_authz gRPC API).
type ExternalSpec struct {
	Address string `json:"address,omitempty"`
	// Timeout is a Go duration (200ms when empty).
	Timeout  string           `json:"timeout,omitempty"`
	FailOpen *bool            `json:"failOpen,omitempty"`
	TLS      *ExternalTLSSpec `json:"tls,omitempty"`
}

// ExternalTLSSpec is the TLS of the connection to the external authorizer.
type ExternalTLSSpec struct {
	// CABundle is the PEM certificates the authorizer's certificate must chain to.
	CABundle   string `json:"caBundle,omitempty"`
	ServerName string `json:"serverName,omitempty"`
}

// Config is inbound.authorization of the resolved configuration a data-plane role runs (Spec
// merged with the injector's defaults): Default is always Allow or Deny, MaxChainDepth always set,
// and the rules compile (Compile).
type Config struct {
	Rules         []RuleConfig `json:"rules"`
	Default       string       `json:"default"`
	DryRun        bool         `json:"dryRun"`
	MaxChainDepth int32        `json:"maxChainDepth"`
	// External is the external authorizer; nil when there is none.
	External *ExternalConfig `json:"external,omitempty"`
}

// RuleConfig is a named CEL rule with its effect, Allow or Deny, as the API and config.yaml
// spell it.
type RuleConfig struct {
	Name   string `json:"name"`
	Effect string `json:"effect"`
	When   string `json:"when"`
}

// ExternalConfig is the resolved external authorizer: Timeout is set and within bounds, Address
// is one the client may dial (plaintext only to loopback or a unix socket).
type ExternalConfig struct {
	Address  string        `json:"address"`
	Timeout  time.Duration `json:"timeout"`
	FailOpen bool          `json:"failOpen"`
	// TLS is nil for plaintext.
	TLS *ExternalTLS `json:"tls,omitempty"`
}

// ExternalTLS is the TLS of the connection to the external authorizer.
type ExternalTLS struct {
	CABundle   string `json:"caBundle"`
	ServerName string `json:"serverName,omitempty"`
}

// CertPool is CABundle's certificates; an error when it holds none.
func (t ExternalTLS) CertPool() (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(t.CABundle)) {
		return nil, errors.New("no PEM certificate")
	}
	return pool, nil
}

// AuthzRules returns the rules as Compile takes them.
func (c Config) AuthzRules() []Rule {
	out := make([]Rule, len(c.Rules))
	for i, r := range c.Rules {
		out[i] = Rule{Name: r.Name, Effect: Effect(r.Effect), When: r.When}
	}
	return out
}

// Compile compiles the rules with the configured default.
func (c Config) Compile() (*Policy, error) {
	return Compile(c.AuthzRules(), Effect(c.Default))
}
