//go:build crashtest

package main

import (
	"log/slog"
	"os"

	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/crashhook"
	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/server"
)

// armCrashHooks arms the faults the crash tests set in the environment
// (see package crashhook). Only a binary built with the crashtest tag,
// as the integration tests build it, has them.
func armCrashHooks(o *server.Options, log *slog.Logger) error {
	h, err := crashhook.Advance(os.Getenv(crashhook.AdvanceEnv), log)
	if err != nil {
		return err
	}
	o.Service.Repository.AdvanceHook = h
	return nil
}
