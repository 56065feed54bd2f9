package bridge

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/bridge/wire"
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

// TestResolve_BadTag_NamesTheField checks that a tag that is not one is a
// 400 in the words of the request, the "tag" the user sent, not the name
// of a Go package.
func TestResolve_BadTag_NamesTheField(t *testing.T) {
	_, err := (&Service{}).resolve(wire.MessageRef{Tag: "zzz"})
	want := `tag "zzz" is 3 characters, want 48 lowercase hex characters`
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "keys:") {
		t.Fatalf("resolve of a bad tag: %v, want %q", err, want)
	}
}
