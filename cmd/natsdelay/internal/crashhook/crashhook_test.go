package crashhook

import (
	"log/slog"
	"strings"
	"testing"
)

// TestAdvance_Parse checks that the crash tests' hook is off
// unless set, and that a bad value is refused with the accepted form
// rather than armed in some other way.
func TestAdvance_Parse(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, v := range []string{"before-commit:1", "after-commit:7"} {
		if h, err := Advance(v, log); err != nil || h == nil {
			t.Errorf("%q: hook %v, err %v; want a hook", v, h != nil, err)
		}
	}
	if h, err := Advance("", log); err != nil || h != nil {
		t.Errorf("unset: hook %v, err %v; want none", h != nil, err)
	}
	for _, v := range []string{"before-commit", "before-commit:0", "after-commit:-1", "during:1", "after-commit:x"} {
		_, err := Advance(v, log)
		if err == nil || !strings.Contains(err.Error(), "want before-commit:N, after-commit:N, rewrite-before-commit:N or rewrite-after-commit:N") {
			t.Errorf("%q: err %v, want the accepted form", v, err)
		}
	}
}

// TestMove_Parse checks the move hook's values: one step or several,
// comma separated, each with a count from 1; anything else is refused
// with the accepted form.
func TestMove_Parse(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, v := range []string{"owned:1", "in-recorded:1,out-recorded:1,committing:1"} {
		if h, err := Move(v, log); err != nil || h == nil {
			t.Errorf("%q: hook %v, err %v; want a hook", v, h != nil, err)
		}
	}
	if h, err := Move("", log); err != nil || h != nil {
		t.Errorf("unset: hook %v, err %v; want none", h != nil, err)
	}
	for _, v := range []string{"owned", "owned:0", "moving:1", "owned:1,", "owned:1,dropped:x"} {
		_, err := Move(v, log)
		if err == nil || !strings.Contains(err.Error(), "want <step>:N[,<step>:N...]") {
			t.Errorf("%q: err %v, want the accepted form", v, err)
		}
	}
}
