//go:build crashtest

package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"

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
	if o.Fleet != nil {
		step, err := crashhook.Move(os.Getenv(crashhook.MoveEnv), log)
		if err != nil {
			return err
		}
		fc := *o.Fleet
		fc.StepHook = step
		if v := os.Getenv(crashhook.MoveChunkEnv); v != "" {
			if fc.MoveChunk, err = strconv.Atoi(v); err != nil {
				return fmt.Errorf("%s %q: want a count of bytes", crashhook.MoveChunkEnv, v)
			}
		}
		o.Fleet = &fc
	}
	return nil
}
