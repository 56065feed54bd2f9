package core

import "github.com/natsdelay/natsdelay/dispatch"

// SetBeforeSwapForTest makes the recovery loop call f with the dispatcher
// of a generation started on a reopened store, before it swaps that
// generation in; nil stops it. Tests only, and not in parallel.
func SetBeforeSwapForTest(f func(*dispatch.Dispatcher)) { beforeSwap = f }
