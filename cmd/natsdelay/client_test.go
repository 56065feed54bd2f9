package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
)

// TestClient_NATSURLAndContext checks that the client commands find the
// server and its credentials as the nats CLI does: --nats wins over
// NATS_URL, NATS_URL over the context, --context over the selected
// context, and the context supplies what nothing else sets. info against a
// server where no service runs tells a connection ("nothing answers") from
// a failed one.
func TestClient_NATSURLAndContext(t *testing.T) {
	t.Parallel()
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	opts.Authorization = "s3cret"
	ns := natsserver.RunServer(&opts)
	t.Cleanup(ns.Shutdown)
	good := ns.ClientURL()
	const bad = "nats://127.0.0.1:1" // nothing listens there

	// A config dir as nats context add leaves it: two contexts, one selected.
	// NB: without XDG_CONFIG_HOME, natscontext looks in the home directory of
	// the user in the passwd database, not in $HOME, so only this is tested.
	xdg := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		path := filepath.Join(xdg, "nats", name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("context/right.json", `{"description": "the test server", "url": "`+good+`", "token": "s3cret"}`)
	write("context/wrong.json", `{"url": "`+bad+`"}`)
	write("context.txt", "right")

	connected := "nothing answers on $DELAY.API.INFO"
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		want string // in stderr
	}{
		{"selected context", nil, nil, connected},
		{"named context wins over selected", nil, []string{"--context", "wrong"}, "connect to NATS at " + bad + " (from nats context wrong)"},
		{"NATS_CONTEXT names one", []string{"NATS_CONTEXT=wrong"}, nil, "(from nats context wrong)"},
		{"NATS_URL wins over context", []string{"NATS_URL=" + bad}, nil, "connect to NATS at " + bad + " (from NATS_URL)"},
		{"NATS_URL with the context's token", []string{"NATS_URL=" + good}, []string{"--context", "right"}, connected},
		{"flag wins over NATS_URL", []string{"NATS_URL=" + bad}, []string{"--nats", good}, connected},
		{"flag token wins over context", nil, []string{"--token", "wrong"}, "uthorization"},
		{"bad NATS_URL", []string{"NATS_URL=http://x:1"}, nil, `NATS_URL "http://x:1": scheme "http"`},
		{"unknown context", nil, []string{"--context", "nope"}, `--context "nope"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := startEnv(t, append([]string{"XDG_CONFIG_HOME=" + xdg}, tt.env...), "", append([]string{"info"}, tt.args...)...)
			p.wait(t, 30*time.Second)
			if e := p.stderr.String(); !strings.Contains(e, tt.want) {
				t.Errorf("stderr %q, want %q", e, tt.want)
			}
		})
	}

}

// TestParse_ContextBeforeCommand checks that --context may come before the
// command, where nats CLI users write it (nats --context X stream ls): it
// is the client command's flag, so an unknown context is that command's
// error, not an unknown flag.
func TestParse_ContextBeforeCommand(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for _, args := range [][]string{{"--context", "nope", "info"}, {"--context=nope", "info"}, {"--log-level", "debug", "--context", "nope", "subjects", ">"}} {
		_, _, err := parse(args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), `--context "nope"`) || strings.Contains(err.Error(), "unknown flag") {
			t.Errorf("%q: %v, want the command's error about context nope", args, err)
		}
	}
	if got := hoistContext([]string{"--context", "x", "serve"}, []string{"info"}); !slices.Equal(got, []string{"--context", "x", "serve"}) {
		t.Errorf("hoisted before a command without --context: %q", got)
	}
}
