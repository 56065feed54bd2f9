package bridge

import "testing"

// A target inside one of the service's own prefixes is refused, the prefix
// itself included; a subject that only shares the prefix's letters is not
// inside it and is taken.
func TestCheckTarget_ReservedPrefixes(t *testing.T) {
	reserved := []string{"delay", "$DELAY.ACK"}
	for _, tc := range []struct {
		subj string
		ok   bool
	}{
		{"delay", false},
		{"delay.x", false},
		{"$DELAY.ACK", false},
		{"$DELAY.ACK.abc", false},
		{"delayed.x", true},
		{"delays", true},
		{"$DELAY.ACKS.x", true},
		{"orders.delay", true},
	} {
		err := checkTarget(tc.subj, reserved)
		if (err == nil) != tc.ok {
			t.Errorf("checkTarget(%q): err %v, want ok %v", tc.subj, err, tc.ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = checkTarget("orders.eu.created", reserved) }); n != 0 {
		t.Errorf("checking a target allocates %v times, want 0", n)
	}
}
