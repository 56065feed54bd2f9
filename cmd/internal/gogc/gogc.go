// Package gogc sets the Go collector's target of the processes that run
// natsdelay's service: serve, and the bench, which runs it in process, so
// that both measure and run the service alike.
package gogc

import (
	"log/slog"
	"runtime/debug"
)

// DefaultPercent is the GOGC the service runs with unless the environment
// gives one. The service's Go heap is small (the store's memtables and
// block cache are outside it), so each collection has little to scan, and
// under load Go's default of 100 collected every ~150 ms. On two cores
// every mark phase took CPU from the dispatcher and the NATS client and
// showed as the lateness tail; 200 halves the collections (and took ~10%
// off the CPU per delivered message) for a heap peak of three times the
// live heap instead of two, a few tens of MB at most. See
// docs/performance-history.md, "The lateness tail".
const DefaultPercent = 200

// Percent is the GOGC to set given the environment's GOGC, env: the
// default when env is empty, else none (set is false): the runtime has
// read the environment's already.
func Percent(env string) (pct int, set bool) {
	if env != "" {
		return 0, false
	}
	return DefaultPercent, true
}

// Apply sets the collector's target unless env, the environment's GOGC,
// gives one, and logs which it is and where it came from.
func Apply(log *slog.Logger, env string) {
	if pct, set := Percent(env); set {
		debug.SetGCPercent(pct)
		log.Info("garbage collector target set", "gogc", pct, "source", "natsdelay's default; the GOGC environment variable overrides it")
		return
	}
	log.Info("garbage collector target from the environment", "gogc", env)
}
