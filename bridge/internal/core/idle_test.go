package core_test

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/internal/core"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// releasingStore is a store on disk that reports each ReleaseMemory call,
// with the deliveries in flight at that moment.
type releasingStore struct {
	*pebblestore.Store
	svc   atomic.Pointer[core.Service]
	calls chan uint64
}

func (r *releasingStore) ReleaseMemory() error {
	var inFlight uint64
	if s := r.svc.Load(); s != nil {
		inFlight = s.Stats().InFlight
	}
	r.calls <- inFlight
	return r.Store.ReleaseMemory()
}

// Guarantee: after a burst of writes, once nothing is in flight and no
// commit came for IdleRelease, the Service hands memory back, once: it
// calls the store's ReleaseMemory with no delivery in flight, counts it in
// MemoryReleases, and every message of the burst was delivered and
// settled on the way (the release changes nothing stored).
func TestService_IdleRelease_OnceAfterBurst(t *testing.T) {
	st, err := pebblestore.Open(pebblestore.Config{Dir: filepath.Join(t.TempDir(), "pebble")})
	if err != nil {
		t.Fatal(err)
	}
	rs := &releasingStore{Store: st, calls: make(chan uint64, 16)}
	const n = 3000 // four to five writes a message, scheduled then ACKed: past IdleReleaseMinWrites
	p := &publisher{delivered: make(chan keys.Key, n)}
	s := open(t, rs, p, func(c *core.Config) { c.IdleRelease = 20 * time.Millisecond })
	rs.svc.Store(s)

	// Every message is scheduled, due now, before any is ACKed, so
	// deliveries stay in flight from the first commit to the last ACK.
	scheduled := make(chan error, n)
	now := time.Now().UnixNano()
	for i := range n {
		msg := &delaystore.StoredMessage{Subject: "idle.burst." + string(rune('a'+i%26)), FireAtNs: now}
		if err := s.Schedule(msg, func(_ keys.Key, err error) { scheduled <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if err := <-scheduled; err != nil {
			t.Fatal(err)
		}
	}
	acked := make(chan error, n)
	for range n {
		if err := s.Ack(next(t, p.delivered), dispatch.Ack{Kind: dispatch.AckDone}, func(err error) { acked <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if err := <-acked; err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	select {
	case inFlight := <-rs.calls:
		if inFlight != 0 {
			t.Fatalf("memory handed back with %d deliveries in flight", inFlight)
		}
	case <-time.After(wait):
		t.Fatal("no release after the burst")
	}
	if c, err := s.Counts(); err != nil || c.Pending != 0 {
		t.Fatalf("counts after the release = %+v, %v; want nothing pending", c, err)
	}
	// NB: Close waits for the release under way, which counts itself in
	// MemoryReleases once the store's part returned. A second release
	// would need as many writes again; none came.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(rs.calls) != 0 || s.MemoryReleases() != 1 {
		t.Fatalf("%d more releases, MemoryReleases %d: want exactly one", len(rs.calls), s.MemoryReleases())
	}
}
