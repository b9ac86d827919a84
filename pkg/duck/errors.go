package duck

import (
	"errors"
	"fmt"
)

// Reasons are CamelCase so they can be used verbatim as condition reasons.
const (
	// ReasonTargetNotFound: the referenced workload does not exist (yet).
	ReasonTargetNotFound = "TargetNotFound"
	// ReasonUnsupportedKind: the kind is unknown to the API server, cluster-scoped, or has no pod template.
	ReasonUnsupportedKind = "UnsupportedKind"
	// ReasonInvalidTargetRef: the reference itself is malformed.
	ReasonInvalidTargetRef = "InvalidTargetRef"
)

// Error is a resolution failure with a condition reason.
type Error struct {
	Reason  string
	Message string
	Err     error
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

func newError(reason string, err error, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), Err: err}
}

// ReasonOf returns the condition reason of a resolution error, or "" when err is not one.
func ReasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// IsTargetNotFound reports whether err means the referenced workload does not exist.
func IsTargetNotFound(err error) bool { return ReasonOf(err) == ReasonTargetNotFound }

// IsUnsupportedKind reports whether err means the reference is to a kind without a pod template.
func IsUnsupportedKind(err error) bool { return ReasonOf(err) == ReasonUnsupportedKind }
