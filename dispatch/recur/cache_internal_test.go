package recur

import (
	"fmt"
	"testing"
	"time"
)

// TestParseCron_Kept checks that a parsed cron spec is kept and shared,
// so the dispatcher does not parse it again for each occurrence, that a
// kept spec plans exactly as a fresh parse does, that an error is never
// kept (a bad spec is refused each time), and that the cache stays within
// its bound however many specs arrive.
func TestParseCron_Kept(t *testing.T) {
	a, err := ParseCron("0 9 * * MON-FRI", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseCron("0 9 * * MON-FRI", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	if a.wall != b.wall {
		t.Error("the same spec and zone parsed twice")
	}
	fresh, err := parseCron("0 9 * * MON-FRI", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC) // over the change to summer time
	for range 5 {
		want := fresh.After(at, at)
		if got := b.After(at, at); !got.Equal(want) {
			t.Fatalf("kept spec plans %v after %v, a fresh parse %v", got, at, want)
		}
		at = want
	}
	if c, err := ParseCron("0 9 * * MON-FRI", "America/New_York"); err != nil || c.Loc.String() != "America/New_York" {
		t.Fatalf("the same spec in another zone: %v, %v", c.Loc, err)
	}
	for range 2 {
		if _, err := ParseCron("0 9 * *", "UTC"); err == nil {
			t.Fatal("a bad spec was accepted")
		}
	}

	c := specCache{max: 8}
	for i := range 20 {
		s, err := parseCron(fmt.Sprintf("%d * * * *", i), "")
		if err != nil {
			t.Fatal(err)
		}
		c.put(fmt.Sprint(i), s)
		if n := c.len(); n > c.max {
			t.Fatalf("cache holds %d, over its bound of %d", n, c.max)
		}
	}
	if _, ok := c.get("19"); !ok {
		t.Error("the newest spec is not kept")
	}
}
