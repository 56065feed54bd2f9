// Package storetest is the contract suite every delaystore.Store engine
// runs, and the raw-engine benchmarks that measure them the same way.
//
// # Basics
//
// An engine's test calls Run with a function that opens a fresh, empty
// store and registers its Close with t.Cleanup. Engines that keep data on
// disk also call RunReopen, and engines that can inject write faults call
// RunFaults. A new guarantee gets a case here, not in one engine's tests.
//
// BenchRawCommit measures batch commits straight on the engine, with no
// repository or group commit on top: it is the baseline the layers above
// are compared against.
package storetest
