package raftstore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// Node's Close must stop Raft, the transport, the listener's goroutines and
// every goroutine of its own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
