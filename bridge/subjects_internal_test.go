package bridge

import (
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/dispatch"
)

// TestLiteralPrefix_StartsEveryMatch checks that SUBJECTS may start its
// read of the registry at a filter's literal start and stop where subjects
// stop having it: every subject the filter matches has it.
func TestLiteralPrefix_StartsEveryMatch(t *testing.T) {
	want := map[string]string{">": "", "*": "", "a": "a", "a.b": "a.b", "a.>": "a.", "a.*.c": "a.", "a.b.*": "a.b.", "*.b": ""}
	for f, p := range want {
		if got := literalPrefix(f); got != p {
			t.Errorf("literalPrefix(%q) = %q, want %q", f, got, p)
		}
	}
	subjects := []string{"a", "ab", "a.b", "a.bc", "a.b.c", "a.x.c", "b", "b.b", "a.b.c.d"}
	for f := range want {
		for _, s := range subjects {
			if dispatch.SubjectMatches(f, s) && !strings.HasPrefix(s, literalPrefix(f)) {
				t.Errorf("%q matches %q but does not start with %q", f, s, literalPrefix(f))
			}
		}
	}
}
