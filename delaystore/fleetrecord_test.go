package delaystore_test

import (
	"errors"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
)

// The fleet record is absent until written, then read as written last;
// an empty one is refused and changes nothing.
func TestRepository_FleetRecord(t *testing.T) {
	r, _ := newRepo(t)
	if got, err := r.FleetRecord(); err != nil || got != nil {
		t.Fatalf("a new store's fleet record: %q, %v; want none", got, err)
	}
	for _, rec := range []string{`{"epoch":1}`, `{"epoch":2}`} {
		if err := r.SetFleetRecord([]byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SetFleetRecord(nil); !errors.Is(err, delaystore.ErrInvalidMessage) {
		t.Fatalf("an empty record: %v, want ErrInvalidMessage", err)
	}
	if got, err := r.FleetRecord(); err != nil || string(got) != `{"epoch":2}` {
		t.Fatalf("the fleet record: %q, %v; want the last written", got, err)
	}
	if err := r.Check(); err != nil {
		t.Fatalf("Check with a fleet record: %v", err)
	}
}
