package console

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// TestVendoredHTMX checks that the embedded htmx is the release its
// README names, unchanged, with its license beside it.
func TestVendoredHTMX(t *testing.T) {
	js, err := staticFS.ReadFile("static/htmx/htmx.min.js")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(js)
	const want = "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717"
	if got := hex.EncodeToString(sum[:]); got != want {
		t.Errorf("htmx.min.js: sha256 %s, want %s (static/htmx/README.md)", got, want)
	}
	readme, err := staticFS.ReadFile("static/htmx/README.md")
	if err != nil || !strings.Contains(string(readme), "2.0.11") || !strings.Contains(string(readme), want) {
		t.Errorf("static/htmx/README.md does not name version 2.0.11 and the hash: %v", err)
	}
	if !strings.Contains(string(js), `version:"2.0.11"`) {
		t.Error("htmx.min.js is not version 2.0.11")
	}
	if lic, err := staticFS.ReadFile("static/htmx/LICENSE"); err != nil || !strings.Contains(string(lic), "Zero-Clause BSD") {
		t.Errorf("static/htmx/LICENSE: %v", err)
	}
}
