// Package setting names the configuration setting a mistake is about, so that the gate
// and its subpackages report a refused configuration in one shape, and an adapter points
// at the line that sets it (docs/caddy.md).
package setting

import "fmt"

// Error is a configuration that Validate refuses. Option is the name of the offending
// setting as a configuration file spells it (price, pay_to, discovery/tags, pass_key, …).
type Error struct {
	Option string
	Err    error
}

// Error names the option and says what is wrong with it.
func (e *Error) Error() string { return e.Option + ": " + e.Err.Error() }

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// Errorf is the *Error of option, its message formatted as fmt.Errorf does.
func Errorf(option, format string, args ...any) error {
	return &Error{Option: option, Err: fmt.Errorf(format, args...)}
}
