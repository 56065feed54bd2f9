package console

import (
	"net/netip"
	"testing"
	"time"
)

// TestThrottle_SourcesBounded checks the bound on the login throttle's
// table: failed logins from twice maxSources addresses leave it at
// maxSources; an address that finds no place counts as failing (a user
// whose budget is spent refuses it) and shares one budget with the
// others that found none; once failMemory has passed, the table makes
// room for new addresses again.
func TestThrottle_SourcesBounded(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	th := newThrottle()
	th.now = func() time.Time { return now }
	th.addUser("alice")
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	for i := range 2 * maxSources {
		if err := th.admit("alice", addr(i)); err != nil && i < maxSources {
			t.Fatalf("address %d, new: %v", i, err)
		}
		th.failed("alice", addr(i))
	}
	if n := th.sourceCount(); n != maxSources {
		t.Fatalf("the table holds %d sources after %d failed, want %d", n, 2*maxSources, maxSources)
	}
	if err := th.admit("alice", addr(3*maxSources)); err != errUserBusy {
		t.Fatalf("a new address with the table full of failing ones and alice's budget spent: %v, want %v", err, errUserBusy)
	}
	spent := 0
	for i := range sourceBurst + 1 {
		if th.admit("nobody", addr(3*maxSources+i)) == errSourceBusy {
			spent++
		}
	}
	if spent != 1 {
		t.Fatalf("addresses without a place: %d of %d refused, want them to share one budget of %d", spent, sourceBurst+1, sourceBurst)
	}
	now = now.Add(failMemory + sweepEvery)
	if err := th.admit("alice", addr(4*maxSources)); err != nil {
		t.Fatalf("a new address once the failures are old: %v", err)
	}
	if n := th.sourceCount(); n != 1 {
		t.Fatalf("the table holds %d sources after the sweep, want the new one only", n)
	}
}
