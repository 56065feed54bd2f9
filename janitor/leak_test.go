package janitor_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// goroutine has an owner whose Close waits for it, so one left running is a
// Close that does not stop what it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
