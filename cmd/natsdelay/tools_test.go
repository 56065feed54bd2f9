package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/console"
)

// ui-passwd writes a line the console's --ui-auth takes, for the
// password read from stdin, and refuses a name the file cannot hold or an
// empty password, writing nothing.
func TestUIPasswd_WritesALineTheConsoleTakes(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run([]string{"ui-passwd", "admin"}, strings.NewReader("s3cret pass\n"), &out, &errOut); code != exitOK {
		t.Fatalf("ui-passwd admin: exit %d, %s", code, errOut.String())
	}
	name, hash, ok := strings.Cut(strings.TrimSuffix(out.String(), "\n"), ":")
	if !ok || name != "admin" || bcrypt.CompareHashAndPassword([]byte(hash), []byte("s3cret pass")) != nil {
		t.Fatalf("ui-passwd admin printed %q, want admin:<bcrypt of the password>", out.String())
	}
	file := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(file, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := console.LoadUsers(file); err != nil {
		t.Fatalf("the console refuses the line: %v", err)
	}
	for _, tc := range []struct {
		args  []string
		stdin string
		code  int
		want  string
	}{
		{[]string{"ui-passwd", "ad:min"}, "x\n", exitUsage, "without colons"},
		{[]string{"ui-passwd", "admin"}, "\n", exitRuntime, "the password is empty"},
		{[]string{"ui-passwd", "admin", "--cost", "4"}, "x\n", exitUsage, "--cost 4"},
		{[]string{"ui-passwd", "admin"}, strings.Repeat("x", 73) + "\n", exitRuntime, "hash the password"},
	} {
		out.Reset()
		errOut.Reset()
		code := run(tc.args, strings.NewReader(tc.stdin), &out, &errOut)
		if code != tc.code || out.Len() != 0 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, nothing printed, an error saying %q", tc.args, code, out.String(), errOut.String(), tc.code, tc.want)
		}
	}
}

// events prints one line per lifecycle event of the subjects its filter
// matches, and only those, and stops on SIGINT with exit 0.
func TestEvents_TailsTheFilteredEventsUntilInterrupted(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir(), "--events").URL()
	tail := start(t, "events", "--nats", url, "orders.>")
	tail.waitLine(t, `msg=subscribed`, 30*time.Second)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.Subscribe("orders.a", func(m *nats.Msg) { _ = m.Respond([]byte(wire.AnswerAck)) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	schedule(t, url, "other.x", "x", "--delay", "1h")
	tag := schedule(t, url, "orders.a", "hello", "--id", "o-1")
	for _, kind := range []string{wire.EventScheduled, wire.EventDelivered, wire.EventAcked} {
		re := `^\S+ ` + kind + ` +orders\.a tag=` + tag + ` attempt=\d fire_at=\S+ id=o-1$`
		if m, _ := tail.stdout.waitLine(re, 30*time.Second, tail.done); m == nil {
			t.Fatalf("no %s event line of orders.a; printed:\n%s", kind, tail.stdout.String())
		}
	}
	tail.signal(t, syscall.SIGINT)
	if code := tail.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("events exited %d on SIGINT, want 0", code)
	}
	if strings.Contains(tail.stdout.String(), "other.x") {
		t.Errorf("events orders.> printed an event of other.x:\n%s", tail.stdout.String())
	}
	if code, _, errOut := runCmd(t, "events", "--nats", url, "--kind", "gone"); code != exitUsage || !strings.Contains(errOut, `--kind "gone"`) {
		t.Errorf("events --kind gone: exit %d, %q; want a usage error", code, errOut)
	}
}

// completion prints each shell's code, which has the shell run this
// executable to complete; run so (COMP_LINE set, as bash's complete -C
// does), natsdelay answers with the commands, flags and values of its
// own command line.
func TestCompletion_ScriptsAndAnswers(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for shell, want := range map[string]string{
		"bash": "complete -C " + exe + " natsdelay\n",
		"zsh":  "bashcompinit\ncomplete -C " + exe + " natsdelay\n",
		"fish": "    " + exe + "\nend\ncomplete -f -c natsdelay -a \"(__complete_natsdelay)\"\n",
	} {
		var out, errOut bytes.Buffer
		if code := run([]string{"completion", shell}, strings.NewReader(""), &out, &errOut); code != exitOK || !strings.HasSuffix(out.String(), want) {
			t.Errorf("completion %s: exit %d, printed %q; want it to end %q", shell, code, out.String(), want)
		}
	}
	for line, want := range map[string]string{
		"natsdelay ev":             "events",
		"natsdelay ui-":            "ui-passwd",
		"natsdelay completion ":    "bash\nzsh\nfish",
		"natsdelay events --ki":    "--kind",
		"natsdelay cancel --filt":  "--filter",
		"natsdelay --log-level wa": "warn",
	} {
		// NB: bash runs the command with its name, the word and the word
		// before as arguments; COMP_LINE is what it completes.
		words := strings.Split(line, " ")
		cur, prev := words[len(words)-1], words[len(words)-2]
		p := startEnv(t, []string{"COMP_LINE=" + line, "COMP_POINT=" + strconv.Itoa(len(line))}, "", "natsdelay", cur, prev)
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("completing %q: exit %d", line, code)
		}
		// NB: the completer gives an enum's values in no set order.
		got := strings.Fields(p.stdout.String())
		for _, w := range strings.Split(want, "\n") {
			if !slices.Contains(got, w) {
				t.Errorf("completing %q answered %q, want %q among them", line, got, w)
			}
		}
	}
}
