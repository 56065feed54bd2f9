// Package crashhook holds the faults the crash tests arm in a natsdelay
// process through the environment. Only a binary built with the crashtest
// tag imports it (see cmd/natsdelay's crashhook_on.go); the default build
// links none of it, and the variables it reads have no effect there.
package crashhook

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/natsdelay/natsdelay/delaystore"
)

// AdvanceEnv names the crash tests' fault: "before-commit:N" or
// "after-commit:N" makes serve kill itself with SIGKILL at the Nth batch
// that plans recurring occurrences, right before or right after its
// commit; "rewrite-before-commit:N" and "rewrite-after-commit:N" do the
// same at the Nth batch that rewrites a schedule (a pause, resume or
// edit). NB: a test hook, never set in production: it exists because a
// kill from outside lands in that window only by chance.
const AdvanceEnv = "NATSDELAY_CRASH_ADVANCE"

// Advance parses the value of AdvanceEnv: nil for "", else
// a RepositoryConfig.AdvanceHook that logs and kills the process at the
// stage and batch it names.
func Advance(v string, log *slog.Logger) (func(delaystore.AdvanceStage), error) {
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
	case "rewrite-before-commit":
		stage = delaystore.RewriteBeforeCommit
	case "rewrite-after-commit":
		stage = delaystore.RewriteAfterCommit
	}
	n, err := strconv.Atoi(nStr)
	if stage == 0 || err != nil || n < 1 {
		return nil, fmt.Errorf("%s %q: want before-commit:N, after-commit:N, rewrite-before-commit:N or rewrite-after-commit:N, N a count from 1", AdvanceEnv, v)
	}
	log.Warn("crash test hook armed: natsdelay kills itself while planning recurring occurrences", "env", AdvanceEnv, "value", v)
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

// MoveEnv names the crash tests' fault in a move of partitions:
// "<step>:N" makes serve kill itself with SIGKILL the Nth time a move of
// this cell's reaches step (see fleet.Config.StepHook): out-recorded,
// chunk-sent, committing, released or dropped at the source, in-recorded,
// imported or owned at the target. MoveChunkEnv, a count of bytes, bounds
// the chunks of a move (fleet.Config.MoveChunk), so that a small test
// moves in several.
const (
	MoveEnv      = "NATSDELAY_CRASH_MOVE"
	MoveChunkEnv = "NATSDELAY_CRASH_MOVE_CHUNK"
)

// moveSteps are the steps a StepHook is told.
var moveSteps = []string{"out-recorded", "chunk-sent", "committing", "released", "dropped", "in-recorded", "imported", "owned"}

// Move parses the value of MoveEnv: nil for "", else a StepHook that logs
// and kills the process at the step and count it names. Several, comma
// separated, arm each: the first reached kills (a cluster cell's nodes
// armed alike die at the first step any of them reaches as leader, and
// the next leader, which carries the move on past that step, at the next).
func Move(v string, log *slog.Logger) (func(string), error) {
	if v == "" {
		return nil, nil
	}
	type arm struct {
		step string
		n    int64
		seen atomic.Int64
	}
	var arms []*arm
	for _, one := range strings.Split(v, ",") {
		step, nStr, _ := strings.Cut(one, ":")
		n, err := strconv.Atoi(nStr)
		if !slices.Contains(moveSteps, step) || err != nil || n < 1 {
			return nil, fmt.Errorf("%s %q: want <step>:N[,<step>:N...], a step of %s and N a count from 1", MoveEnv, v, strings.Join(moveSteps, ", "))
		}
		arms = append(arms, &arm{step: step, n: int64(n)})
	}
	log.Warn("crash test hook armed: natsdelay kills itself in a move of partitions", "env", MoveEnv, "value", v)
	return func(at string) {
		for _, a := range arms {
			if at != a.step || a.seen.Add(1) != a.n {
				continue
			}
			log.Warn("crash test hook: SIGKILL", "step", a.step, "count", a.n)
			killSelf()
		}
	}, nil
}
