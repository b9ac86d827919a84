package authconfig

import "fmt"

// validateMTLS checks mtls.mode: one of the three modes, and SPIFFE on for permissive and strict
// (the sidecars present the workload's X.509 SVID from the SPIRE agent).
func (c Config) validateMTLS() []error {
	switch c.MTLS.Mode {
	case MTLSOff:
		return nil
	case MTLSPermissive, MTLSStrict:
		if !c.Spiffe.Enabled {
			return []error{fmt.Errorf("mtls.mode: %s needs SPIFFE (spiffe.enabled): the sidecars present the workload's X.509 SVID; set mtls.mode: off or turn SPIFFE on", c.MTLS.Mode)}
		}
		return nil
	default:
		return []error{fmt.Errorf("mtls.mode: %q is not off, permissive or strict", c.MTLS.Mode)}
	}
}
