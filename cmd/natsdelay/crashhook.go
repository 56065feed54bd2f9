package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"

	"natsdelay/delaystore"
)

// crashAdvanceEnv names the crash tests' fault: "before-commit:N" or
// "after-commit:N" makes serve kill itself with SIGKILL at the Nth batch
// that plans recurring occurrences, right before or right after its
// commit. NB: a test hook, never set in production: it exists because a
// kill from outside lands in that window only by chance.
const crashAdvanceEnv = "NATSDELAY_CRASH_ADVANCE"

// advanceCrashHook parses the value of crashAdvanceEnv: nil for "", else
// a RepositoryConfig.AdvanceHook that logs and kills the process at the
// stage and batch it names.
func advanceCrashHook(v string, log *slog.Logger) (func(delaystore.AdvanceStage), error) {
	if v == "" {
		return nil, nil
	}
	stageName, nStr, _ := strings.Cut(v, ":")
	var stage delaystore.AdvanceStage
	switch stageName {
	case "before-commit":
		stage = delaystore.AdvanceBeforeCommit
	case "after-commit":
		stage = delaystore.AdvanceAfterCommit
	}
	n, err := strconv.Atoi(nStr)
	if stage == 0 || err != nil || n < 1 {
		return nil, fmt.Errorf("%s %q: want before-commit:N or after-commit:N, N a count from 1", crashAdvanceEnv, v)
	}
	log.Warn("crash test hook armed: natsdelay kills itself while planning recurring occurrences", "env", crashAdvanceEnv, "value", v)
	var batches atomic.Int64
	return func(at delaystore.AdvanceStage) {
		if at != stage || batches.Add(1) != int64(n) {
			return
		}
		// The test waits for this line to know the kill was the hook's.
		log.Warn("crash test hook: SIGKILL", "stage", stageName, "batch", n)
		killSelf()
	}, nil
}
