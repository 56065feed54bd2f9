package bridge

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDocs_Limits_ControlHeaders checks the row of docs/limits.md about
// the reserved prefix against the control headers ingest knows: it gives
// their number and names each.
func TestDocs_Limits_ControlHeaders(t *testing.T) {
	b, err := os.ReadFile("../docs/limits.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| reserved header prefix") {
			row = line
		}
	}
	if want := "the " + strconv.Itoa(len(controlHeaders)) + " control headers"; !strings.Contains(row, want) {
		t.Fatalf("docs/limits.md reserved prefix row %q does not say %q", row, want)
	}
	for _, h := range controlHeaders {
		if !strings.Contains(row, "`"+h+"`") {
			t.Errorf("docs/limits.md reserved prefix row does not name `%s`", h)
		}
	}
}
