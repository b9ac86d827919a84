package v1alpha1

import (
	"bytes"
	"fmt"
	"strconv"
)

// Rate is a decimal number kept as its JSON text: CRD schemas may carry numbers, but Kubernetes
// API types avoid floats (their rounding would change the object on a round trip), so the value is
// stored verbatim and parsed where it is used.
//
// +kubebuilder:validation:Type=number
type Rate string

// UnmarshalJSON accepts a JSON number (and, leniently, a quoted number).
func (r *Rate) UnmarshalJSON(b []byte) error {
	b = bytes.Trim(b, `"`)
	if _, err := strconv.ParseFloat(string(b), 64); err != nil {
		return fmt.Errorf("rate %q is not a number", b)
	}
	*r = Rate(b)
	return nil
}

// MarshalJSON writes the rate as a JSON number.
func (r Rate) MarshalJSON() ([]byte, error) {
	if r == "" {
		return []byte("0"), nil
	}
	if _, err := strconv.ParseFloat(string(r), 64); err != nil {
		return nil, fmt.Errorf("rate %q is not a number", string(r))
	}
	return []byte(r), nil
}

// Float64 returns the rate's value (0 when unset).
func (r Rate) Float64() float64 {
	f, _ := strconv.ParseFloat(string(r), 64)
	return f
}
