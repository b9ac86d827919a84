package authz

import (
	"fmt"
	"regexp"
	"time"
)

// The external authorizer's settings (inbound.authorization.external), checked the same way by
// the webhook, the controller, the sidecars (authconfig) and the client (extauthz). The CRD's CEL
// rules spell the same patterns (TestExternalAddressAdmissionAgreesWithTheClient).
const (
	// DefaultExternalTimeout bounds one Check: an authorizer on loopback answers in well under a
	// millisecond, so this is a hang, not a slow policy.
	DefaultExternalTimeout = 200 * time.Millisecond
	MinExternalTimeout     = 10 * time.Millisecond
	MaxExternalTimeout     = 5 * time.Second
)

const (
	// ExternalTargetPattern is a gRPC target the client dials: host:port, dns:///host:port,
	// passthrough:///host:port, unix:path or unix-abstract:name.
	ExternalTargetPattern = `^((unix|unix-abstract):.+|((dns|passthrough):///)?[^/\s]+:[0-9]{1,5})$`
	// PlaintextTargetPattern is a target plaintext may reach: a unix socket, or localhost,
	// 127.x.x.x or [::1] (other spellings of a loopback address are refused rather than reasoned
	// about).
	PlaintextTargetPattern = `^((unix|unix-abstract):.+|((dns|passthrough):///)?(localhost|127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}|\[::1\]):[0-9]{1,5})$`
)

var (
	externalTarget  = regexp.MustCompile(ExternalTargetPattern)
	plaintextTarget = regexp.MustCompile(PlaintextTargetPattern)
)

// CheckExternalAddress refuses an address the client cannot dial, and a plaintext one (tls false)
// that is not loopback or a unix socket: the decision travels on this connection, and anyone on
// the path of a plaintext one could answer allow.
func CheckExternalAddress(address string, tls bool) error {
	if !externalTarget.MatchString(address) {
		return fmt.Errorf("external.address: %q is not host:port, dns:///host:port or unix:///path", address)
	}
	if !tls && !plaintextTarget.MatchString(address) {
		return fmt.Errorf("external.address: %q is not loopback or a unix socket: plaintext only to localhost, 127.0.0.0/8, [::1] or unix:; set external.tls for a remote authorizer", address)
	}
	return nil
}

// CheckExternalTimeout refuses a timeout outside MinExternalTimeout..MaxExternalTimeout.
func CheckExternalTimeout(d time.Duration) error {
	if d < MinExternalTimeout || d > MaxExternalTimeout {
		return fmt.Errorf("external.timeout: %s is not %s to %s", d, MinExternalTimeout, MaxExternalTimeout)
	}
	return nil
}
