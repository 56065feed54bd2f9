package main

import (
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	natsd "github.com/nats-io/nats-server/v2/server"
	natsserver "github.com/nats-io/nats-server/v2/test"
)

// TestServe_PubSub_DeliversAndStopsCleanly runs the binary as a user would:
// serve with an embedded server, sub waiting, pub scheduling 200ms out. The
// delivery arrives once, as attempt 1, never before its fire time, is ACKed,
// and SIGTERM then stops serve with exit code 0. It is the one test of the
// whole path through three processes; the others open the server in
// process.
func TestServe_PubSub_DeliversAndStopsCleanly(t *testing.T) {
	t.Parallel()
	srv, url := serve(t, t.TempDir())
	srv.waitLine(t, `msg="embedded nats-server listening" client_url=nats://127.0.0.1:\d+`, time.Second)

	sub := start(t, "sub", "orders.reminder", "--nats", url, "--count", "1")
	sub.waitLine(t, `msg=subscribed subject=orders.reminder`, 30*time.Second)

	pub := start(t, "pub", "orders.reminder", `{"order":42}`, "--delay", "200ms", "--nats", url, "-H", "X-Trace: abc")
	if code := pub.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("pub exit code %d", code)
	}
	m := regexp.MustCompile(`^scheduled orders\.reminder tag=([0-9a-f]{48}) fire_at=(\S+Z)\n$`).FindStringSubmatch(pub.stdout.String())
	if m == nil {
		t.Fatalf("pub printed %q, want scheduled orders.reminder tag=<48 hex> fire_at=<time>", pub.stdout.String())
	}
	tag, fireAt := m[1], m[2]

	if code := sub.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("sub exit code %d", code)
	}
	out := sub.stdout.String()
	head := regexp.MustCompile(`(?m)^\[#1\] orders\.reminder tag=(\S+) attempt=(\d+) fire_at=(\S+) lateness=(\S+)$`).FindStringSubmatch(out)
	if head == nil {
		t.Fatalf("sub printed %q: no delivery line", out)
	}
	if head[1] != tag || head[2] != "1" || head[3] != fireAt {
		t.Fatalf("delivery tag=%s attempt=%s fire_at=%s, want tag=%s attempt=1 fire_at=%s", head[1], head[2], head[3], tag, fireAt)
	}
	if late, err := time.ParseDuration(head[4]); err != nil || late < 0 {
		t.Fatalf("lateness %q: delivered early or unreadable (%v)", head[4], err)
	}
	if !strings.Contains(out, "X-Trace: abc\n") || !strings.Contains(out, `{"order":42}`) {
		t.Fatalf("sub printed %q: want the X-Trace header and the payload", out)
	}

	// An error reply is printed and is exit code 1.
	bad := start(t, "pub", "orders.reminder", "x", "--delay", "90x", "--nats", url)
	if code := bad.wait(t, 30*time.Second); code != exitRuntime {
		t.Fatalf("pub with a bad delay: exit code %d, want %d", code, exitRuntime)
	}
	if e := bad.stderr.String(); !strings.Contains(e, "400") || !strings.Contains(e, "90x") {
		t.Fatalf("pub with a bad delay printed %q, want the 400 and the value", e)
	}

	srv.signal(t, syscall.SIGTERM)
	if code := srv.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("serve exit code after SIGTERM %d, want 0", code)
	}
	srv.waitLine(t, `msg="natsdelay stopped"`, time.Second)
}

// TestServe_Restart_KeepsMessages checks that a message accepted before a
// clean stop is delivered after a restart on the same data dir, as its
// first attempt.
func TestServe_Restart_KeepsMessages(t *testing.T) {
	for _, engine := range []string{"pebble", "bolt"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			first := serveInProcess(t, dir, "--engine", engine)
			pub := startIn(t, "kept", "pub", "jobs.later", "-", "--delay", "1s", "--nats", first.URL(), "--json")
			if code := pub.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("pub exit code %d", code)
			}
			var rep struct{ Tag, Subject string }
			if err := json.Unmarshal([]byte(pub.stdout.String()), &rep); err != nil || len(rep.Tag) != 48 {
				t.Fatalf("pub --json printed %q: %v", pub.stdout.String(), err)
			}
			if err := first.Close(); err != nil {
				t.Fatalf("first serve: Close: %v", err)
			}

			second := serveInProcess(t, dir, "--engine", engine)
			sub := start(t, "sub", "jobs.later", "--nats", second.URL(), "--count", "1", "--json")
			if code := sub.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("sub exit code %d", code)
			}
			var d delivery
			if err := json.Unmarshal([]byte(sub.stdout.String()), &d); err != nil {
				t.Fatalf("sub --json printed %q: %v", sub.stdout.String(), err)
			}
			if d.Tag != rep.Tag || d.Attempt != 1 || d.Data != "kept" || d.LatenessMs < 0 {
				t.Fatalf("after restart got %+v, want tag %s, attempt 1, data kept, not early", d, rep.Tag)
			}
			if err := second.Close(); err != nil {
				t.Fatalf("second serve: Close: %v", err)
			}
		})
	}
}

// tokenServer runs a nats-server that takes clients with the token
// s3cret, and returns it with its options, to start it again with.
func tokenServer(t *testing.T) (*natsd.Server, natsd.Options) {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	opts.Authorization = "s3cret"
	ns := natsserver.RunServer(&opts)
	t.Cleanup(ns.Shutdown)
	return ns, opts
}

// TestServe_ExternalNATS_NoToken_ExitsWithAuthError checks that serve
// without the credentials of the NATS server it is given says so and
// exits with the runtime exit code, rather than wait.
func TestServe_ExternalNATS_NoToken_ExitsWithAuthError(t *testing.T) {
	t.Parallel()
	ns, _ := tokenServer(t)
	denied := start(t, "serve", "--nats", ns.ClientURL(), "--engine", "memory")
	if code := denied.wait(t, 30*time.Second); code != exitRuntime {
		t.Fatalf("serve without the token: exit code %d, want %d", code, exitRuntime)
	}
	if e := denied.stderr.String(); !strings.Contains(e, "uthorization") {
		t.Fatalf("serve without the token printed %q, want the authorization error", e)
	}
}

// TestServe_ExternalNATS_AuthAndReconnect checks serve on a NATS server it
// did not start: it logs in with --token, delivers, and rides out a
// restart of that server, logging the disconnect and the reconnect.
func TestServe_ExternalNATS_AuthAndReconnect(t *testing.T) {
	t.Parallel()
	ns, opts := tokenServer(t)
	url := ns.ClientURL()
	srv := openServe(t, "--nats", url, "--token", "s3cret", "--engine", "memory")
	srv.waitLine(t, `msg="natsdelay ready" nats_url=`+regexp.QuoteMeta(url), time.Second)

	// Restart the server on the same port: the service reconnects.
	port := ns.Addr().(*net.TCPAddr).Port
	ns.Shutdown()
	ns.WaitForShutdown()
	srv.waitLine(t, `msg="nats disconnected"`, 30*time.Second)
	opts.Port = port
	ns = natsserver.RunServer(&opts)
	t.Cleanup(ns.Shutdown)
	srv.waitLine(t, `msg="nats reconnected"`, 30*time.Second)

	sub := start(t, "sub", "auth.ok", "--nats", url, "--token", "s3cret", "--count", "1")
	sub.waitLine(t, `msg=subscribed`, 30*time.Second)
	pub := start(t, "pub", "auth.ok", "hi", "--nats", url, "--token", "s3cret")
	if code := pub.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("pub exit code %d", code)
	}
	if code := sub.wait(t, 30*time.Second); code != 0 || !strings.Contains(sub.stdout.String(), "attempt=1") {
		t.Fatalf("sub exit code %d, printed %q", code, sub.stdout.String())
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestServe_PortInUse_ExitsWithHint checks that a taken port is a usage
// error that says so and how to pick another.
func TestServe_PortInUse_ExitsWithHint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := start(t, "serve", "--nats-listen", ln.Addr().String(), "--data-dir", t.TempDir())
	if code := p.wait(t, 30*time.Second); code != exitUsage {
		t.Fatalf("exit code %d, want %d", code, exitUsage)
	}
	e := p.stderr.String()
	if !strings.Contains(e, "already in use") || !strings.Contains(e, "--nats-listen") || !strings.Contains(e, ln.Addr().String()) {
		t.Fatalf("stderr %q: want the address, that it is in use, and --nats-listen", e)
	}
}

// TestServe_DataDirInUse_ExitsFirst checks that a second serve on a data
// dir in use says so and exits with a usage error before it starts a NATS
// server or takes a port, and leaves the first serving. The first holds
// the data dir in this process; the lock is the operating system's, which
// the second, a process, meets all the same.
func TestServe_DataDirInUse_ExitsFirst(t *testing.T) {
	for _, engine := range []string{"pebble", "bolt"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			first := serveInProcess(t, dir, "--engine", engine)
			second := start(t, "serve", "--nats-listen", "127.0.0.1:0", "--data-dir", dir, "--engine", engine)
			if code := second.wait(t, 30*time.Second); code != exitUsage {
				t.Fatalf("second serve: exit code %d, want %d", code, exitUsage)
			}
			e := second.stderr.String()
			if !strings.Contains(e, "the data dir "+dir+" is in use by another natsdelay") {
				t.Errorf("second serve printed %q, want that the data dir %s is in use", e, dir)
			}
			if strings.Contains(e, "nats-server listening") || strings.Contains(e, "resource temporarily unavailable") {
				t.Errorf("second serve printed %q: it started a server or reached the engine", e)
			}
			schedule(t, first.URL(), "still.serving", "x", "--delay", "1h")
			if err := first.Close(); err != nil {
				t.Fatalf("first serve: Close: %v", err)
			}
		})
	}
}

// TestClient_BadArguments_SayWhatIsWrong runs the commands as a user would
// with the arguments that used to give puzzling errors: each is a usage
// error, exit code 2, that says what is wrong, and nothing is sent.
func TestClient_BadArguments_SayWhatIsWrong(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"pub", "", "x"}, "natsdelay: error: invalid settings:\n  subject is empty: want a subject such as orders.reminder\n"},
		{[]string{"serve", "--ack-wait", "-1s"}, "--ack-wait -1s: must be > 0\n"},
		{[]string{"cancel"}, "natsdelay: error: cancel: which message? natsdelay cancel TAG, or natsdelay cancel --subject SUBJECT --id ID; natsdelay help cancel tells more\n"},
	} {
		code, out, errOut := runCmd(t, tt.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tt.want) {
			t.Errorf("natsdelay %q: exit code %d, stdout %q, stderr %q; want %d and %q", tt.args, code, out, errOut, exitUsage, tt.want)
		}
	}
}

// TestSub_Count_TakesExactlyThat checks that sub --count 1 takes one
// delivery and leaves the others pending, not delivered and unACKed: a
// second sub gets them as attempt 1, not as redeliveries after the ack
// wait.
func TestSub_Count_TakesExactlyThat(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir()).URL()
	first := start(t, "sub", "count.one", "--nats", url, "--count", "1", "--json")
	first.waitLine(t, `msg=subscribed subject=count.one`, 30*time.Second)
	// All three fire at once, so the first sub could take all three.
	at := time.Now().Add(4 * time.Second).Truncate(time.Second).Add(time.Second).UTC().Format(time.RFC3339)
	for _, d := range []string{"a", "b", "c"} {
		schedule(t, url, "count.one", d, "--at", at)
	}
	if code := first.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("first sub exit code %d", code)
	}
	if n := strings.Count(first.stdout.String(), "\n"); n != 1 {
		t.Fatalf("sub --count 1 printed %d deliveries: %q", n, first.stdout.String())
	}
	// The ack wait is 30s: attempt 1 within 15s means nothing was taken
	// and left unACKed.
	second := start(t, "sub", "count.one", "--nats", url, "--count", "2", "--json")
	if code := second.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("second sub exit code %d", code)
	}
	got := map[string]bool{}
	for line := range strings.Lines(first.stdout.String() + second.stdout.String()) {
		var d delivery
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("sub printed %q: %v", line, err)
		}
		if d.Attempt != 1 {
			t.Errorf("delivery %q is attempt %d, want 1", d.Data, d.Attempt)
		}
		got[d.Data] = true
	}
	if len(got) != 3 {
		t.Errorf("the two subs got %v, want a, b and c once each", got)
	}
}

// TestPub_DelayInDays_Scheduled checks that pub --delay takes days, which
// the service's Delay header does not: 7d is scheduled seven days out, and
// a --ttl in days is taken too, and so is a --debounce; a fraction of a
// day is a usage error.
func TestPub_DelayInDays_Scheduled(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir()).URL()
	before := time.Now()
	out := mustRun(t, "pub", "days.later", "x", "--delay", "7d", "--ttl", "1d", "--nats", url, "--json")
	var rep struct {
		FireAt time.Time `json:"fire_at"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("pub --json printed %q: %v", out, err)
	}
	if lo, hi := before.Add(7*24*time.Hour), time.Now().Add(7*24*time.Hour); rep.FireAt.Before(lo.Truncate(time.Millisecond)) || rep.FireAt.After(hi) {
		t.Errorf("--delay 7d: fire_at %v, want between %v and %v", rep.FireAt, lo, hi)
	}
	// --debounce takes days too; with --debounce-max equal to it the
	// second publish is due when the first was.
	var first, second struct {
		FireAt string `json:"fire_at"`
	}
	for _, rep := range []any{&first, &second} {
		out := mustRun(t, "pub", "days.debounced", "x", "--id", "d", "--debounce", "1d", "--debounce-max", "1d", "--nats", url, "--json")
		if err := json.Unmarshal([]byte(out), rep); err != nil {
			t.Fatalf("pub --debounce --json printed %q: %v", out, err)
		}
	}
	if second.FireAt == "" || second.FireAt != first.FireAt {
		t.Errorf("--debounce 1d --debounce-max 1d: fire_at %q then %q, want the same", first.FireAt, second.FireAt)
	}
	// --throttle too: the first publish is due at once and pending, so
	// the second is held a day; the third folds into it.
	mustRun(t, "pub", "days.throttled", "1", "--id", "t", "--throttle", "1d", "--nats", url)
	held := mustRun(t, "pub", "days.throttled", "2", "--id", "t", "--throttle", "1d", "--nats", url, "--json")
	folded := mustRun(t, "pub", "days.throttled", "3", "--id", "t", "--throttle", "1d", "--nats", url)
	var h struct {
		FireAt string `json:"fire_at"`
	}
	if err := json.Unmarshal([]byte(held), &h); err != nil || !strings.HasPrefix(folded, "folded into days.throttled ") || !strings.Contains(folded, "fire_at="+h.FireAt) {
		t.Errorf("--throttle 1d: the second printed %q, the third %q; want the third folded into the second's fire time", held, folded)
	}
	code, _, errOut := runCmd(t, "pub", "days.later", "x", "--delay", "1.5d", "--nats", url)
	if code != exitUsage || !strings.Contains(errOut, `--delay "1.5d": want whole days first, such as 7d or 1d12h`) {
		t.Errorf("--delay 1.5d: exit code %d, stderr %q; want %d and what is accepted", code, errOut, exitUsage)
	}
}
