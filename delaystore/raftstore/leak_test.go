package raftstore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// Node's Close must stop Raft, the transport, the listener's goroutines and
// every goroutine of its own.
//
// One goroutine may outlive a node by design: Node.await's wait for a
// barrier or a membership change that Raft stopped answering at Shutdown
// (see await).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error"))
}
