//go:build !crashtest

package main

import (
	"log/slog"

	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/server"
)

// armCrashHooks does nothing: the default build has no crash hooks, and
// the variables the crash tests set have no effect on it. A binary built
// with the crashtest tag has them (crashhook_on.go).
func armCrashHooks(*server.Options, *slog.Logger) error { return nil }
