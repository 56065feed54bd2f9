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
