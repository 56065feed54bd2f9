// Package usage marks the errors that a different command line or config
// would fix, which both binaries report with exit code 2, apart from the
// runs that failed (exit code 1).
package usage

import (
	"errors"
	"fmt"
)

// ErrUsage is matched by every error that Wrap or Errorf returns.
var ErrUsage = errors.New("usage")

// Wrap marks err as a usage error without changing its text.
func Wrap(err error) error { return usageError{err} }

// Errorf returns a usage error built as fmt.Errorf does.
func Errorf(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == ErrUsage }
