package usage_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/natsdelay/natsdelay/cmd/internal/usage"
)

// TestUsage_MarksWithoutChangingText checks that a usage error reads as the
// error it marks, is matched by ErrUsage, and still unwraps to its cause.
func TestUsage_MarksWithoutChangingText(t *testing.T) {
	err := usage.Errorf("--limit %d: want > 0: %w", -1, fs.ErrInvalid)
	if err.Error() != "--limit -1: want > 0: invalid argument" {
		t.Errorf("text %q", err)
	}
	if !errors.Is(err, usage.ErrUsage) || !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("%v: not matched by ErrUsage and its cause", err)
	}
	wrapped := fmt.Errorf("config: %w", usage.Wrap(fs.ErrNotExist))
	if !errors.Is(wrapped, usage.ErrUsage) || !errors.Is(wrapped, fs.ErrNotExist) {
		t.Errorf("%v: not matched through a wrap", wrapped)
	}
	if errors.Is(fs.ErrNotExist, usage.ErrUsage) {
		t.Error("an unmarked error matched ErrUsage")
	}
}
