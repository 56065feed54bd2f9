package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// runCmd runs natsdelay with args to the end and returns its exit code and
// output. A command that only speaks to the service runs in this process,
// through run as main calls it: a start of the test binary built with the
// race detector costs most of a second of CPU, and these tests run
// hundreds of commands. The rest run as a child process: serve, sub,
// events and help, and any command given --help or --version, for which
// the command line parser ends the process. The tests of what a process
// does (signals, exit on a lost connection) start one themselves.
func runCmd(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if runsInProcess(args) {
		return runInProcess(args...)
	}
	p := start(t, args...)
	code = p.wait(t, 30*time.Second)
	return code, p.stdout.String(), p.stderr.String()
}

// inProcessCommands are the commands runCmd runs in this process.
var inProcessCommands = []string{
	"pub", "info", "subjects", "ls", "schedules", "get", "cancel", "reschedule", "fire",
	"dead", "limits", "pause", "resume", "cluster", "cells", "backup", "restore", "completion", "ui-passwd",
}

// runsInProcess reports whether runCmd runs args in this process.
func runsInProcess(args []string) bool {
	if len(args) == 0 || !slices.Contains(inProcessCommands, args[0]) {
		return false
	}
	return !slices.ContainsFunc(args, func(a string) bool {
		return a == "-h" || a == "--help" || a == "--version" || strings.HasPrefix(a, "--help=") || strings.HasPrefix(a, "--version=")
	})
}

// mustRun is runCmd for a command that must succeed.
func mustRun(t testing.TB, args ...string) string {
	t.Helper()
	code, out, errOut := runCmd(t, args...)
	if code != 0 {
		t.Fatalf("natsdelay %s: exit code %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// schedule publishes one message with pub --json and returns its tag.
func schedule(t testing.TB, url, subject, data string, extra ...string) string {
	t.Helper()
	// In this process: the data of a test, not the pub command under
	// test, so it need not pay a process start each.
	var stdout, stderr bytes.Buffer
	args := append([]string{"pub", subject, data, "--nats", url, "--json"}, extra...)
	if code := run(args, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("natsdelay %s: exit %d\n%s", strings.Join(args, " "), code, stderr.String())
	}
	out := stdout.String()
	var rep struct{ Tag string }
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Tag) != 48 {
		t.Fatalf("pub --json printed %q: %v", out, err)
	}
	return rep.Tag
}

// TestAdmin_InfoLsGetCancel drives the admin commands against a running
// serve, through the API only: the tables and the JSON show what was
// scheduled, in fire order, pages are followed, and a canceled message is
// gone (404, exit code 1).
func TestAdmin_InfoLsGetCancel(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir()).URL()
	const subj = "admin.jobs"
	tags := []string{
		schedule(t, url, subj, "one", "--delay", "1h"),
		schedule(t, url, subj, "hello", "--delay", "2h", "--id", "job-2", "-H", "X-K:v"),
		schedule(t, url, subj, "three", "--delay", "3h", "--ttl", "1h"),
	}
	at := []string{"--nats", url}

	// info, as a table and as JSON.
	out := mustRun(t, append([]string{"info"}, at...)...)
	for _, re := range []string{`(?m)^version\s+` + regexp.QuoteMeta(bridge.Version) + `$`, `(?m)^engine\s+pebble$`,
		`(?m)^pending\s+3$`, `(?m)^subjects\s+1$`, `(?m)^due within 24h\s+3$`, `(?m)^undeliverable\s+0$`, `(?m)^window evictions\s+0$`, `(?m)^api prefix\s+\$DELAY\.API$`, `(?m)^ack wait\s+30s$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("info printed\n%s\nwant a line matching %s", out, re)
		}
	}
	if strings.Contains(out, " \n") {
		t.Fatalf("info printed trailing spaces:\n%q", out)
	}
	var info wire.InfoReply
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"info", "--json"}, at...)...)), &info); err != nil {
		t.Fatal(err)
	}
	if info.Version != bridge.Version || info.Engine != "pebble" || info.Counts.Pending != 3 || info.Config.IngestPrefix != "delay" {
		t.Fatalf("info --json = %+v, want version %s, pebble, 3 pending, ingest prefix delay", info, bridge.Version)
	}

	// ls: a table in fire order, its columns aligned.
	out = mustRun(t, append([]string{"ls", subj}, at...)...)
	ls := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(ls) != 5 || !strings.HasPrefix(ls[0], "TAG ") || ls[4] != "3 pending on "+subj {
		t.Fatalf("ls printed\n%s\nwant a header, 3 rows and a count", out)
	}
	col := strings.Index(ls[0], "FIRE AT")
	for i, l := range ls[1:4] {
		if !strings.HasPrefix(l, tags[i]+" ") {
			t.Fatalf("ls row %d %q, want tag %s: fire order", i+1, l, tags[i])
		}
		if !regexp.MustCompile(`^\d{4}-`).MatchString(l[col:]) {
			t.Fatalf("ls row %d %q: FIRE AT column not aligned at %d", i+1, l, col)
		}
	}
	if !strings.Contains(ls[2], " job-2 ") {
		t.Fatalf("ls row 2 %q: want the id job-2", ls[2])
	}
	// One page and a hint, then every page followed as one JSON reply.
	out = mustRun(t, append([]string{"ls", subj, "--limit", "1"}, at...)...)
	if !strings.Contains(out, tags[0]) || strings.Contains(out, tags[1]) || !strings.Contains(out, "--after "+tags[0]) {
		t.Fatalf("ls --limit 1 printed\n%s\nwant the first message and how to get the next page", out)
	}
	var page wire.ListReply
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"ls", subj, "--limit", "2", "--json"}, at...)...)), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 2 || page.Next != tags[1] {
		t.Fatalf("ls --limit 2 --json: %d messages, next %q; want 2 and next %s", len(page.Messages), page.Next, tags[1])
	}
	var all wire.ListReply
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"ls", subj, "--limit", "1", "--all", "--json"}, at...)...)), &all); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range all.Messages {
		got = append(got, m.Tag)
	}
	if !slices.Equal(got, tags) || all.Next != "" {
		t.Fatalf("ls --limit 1 --all --json: tags %v next %q, want %v and no next", got, all.Next, tags)
	}

	// get, by tag with the payload, and by subject and id as JSON.
	out = mustRun(t, append([]string{"get", tags[1], "--payload"}, at...)...)
	for _, re := range []string{`(?m)^tag\s+` + tags[1] + `$`, `(?m)^id\s+job-2$`, `(?m)^header\s+X-K: v$`, `(?m)^payload\s+hello$`, `(?m)^size\s+5$`, `(?m)^attempt\s+0$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("get printed\n%s\nwant a line matching %s", out, re)
		}
	}
	var mi wire.MessageInfo
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"get", "--subject", subj, "--id", "job-2", "--json"}, at...)...)), &mi); err != nil {
		t.Fatal(err)
	}
	if mi.Tag != tags[1] || mi.Subject != subj || mi.Payload != nil {
		t.Fatalf("get --subject --id --json = %+v, want tag %s and no payload", mi, tags[1])
	}

	// cancel by subject and id; then the message is gone: 404, exit 1.
	if out := mustRun(t, append([]string{"cancel", "--subject", subj, "--id", "job-2"}, at...)...); out != "canceled "+subj+" id=job-2\n" {
		t.Fatalf("cancel printed %q", out)
	}
	for _, args := range [][]string{{"get", tags[1]}, {"cancel", tags[1]}} {
		code, out, errOut := runCmd(t, append(args, at...)...)
		if code != exitRuntime || out != "" || !strings.HasPrefix(errOut, "natsdelay: error: 404 ") || !strings.Contains(errOut, tags[1]) {
			t.Fatalf("%s after cancel: exit code %d, stdout %q, stderr %q; want 1 and natsdelay: error: 404 naming the tag", args[0], code, out, errOut)
		}
	}
	if out := mustRun(t, append([]string{"cancel", tags[0], "--json"}, at...)...); out != `{"canceled":true}`+"\n" {
		t.Fatalf("cancel --json printed %q", out)
	}
	if out := mustRun(t, append([]string{"info"}, at...)...); !regexp.MustCompile(`(?m)^pending\s+1$`).MatchString(out) {
		t.Fatalf("info after two cancels printed\n%s\nwant pending 1", out)
	}

	// A 400 from the service is also exit 1, with its code.
	code, _, errOut := runCmd(t, append([]string{"get", "nothex"}, at...)...)
	if code != exitRuntime || !strings.HasPrefix(errOut, "natsdelay: error: 400 ") {
		t.Fatalf("get of a bad tag: exit code %d, stderr %q; want 1 and natsdelay: error: 400", code, errOut)
	}
}

// TestAdmin_BadUsage_ExitsTwo checks that a message named twice, or not
// at all, is a usage error found before connecting: no server runs here.
func TestAdmin_BadUsage_ExitsTwo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get"}, "get: which message? natsdelay get TAG, or natsdelay get --subject SUBJECT --id ID"},
		{[]string{"cancel"}, "cancel: which message? natsdelay cancel TAG, or natsdelay cancel --subject SUBJECT --id ID"},
		{[]string{"get", "abc", "--subject", "s"}, "not both"},
		{[]string{"cancel", "abc", "--id", "x"}, "not both"},
		{[]string{"get", "--subject", "s"}, "--subject and --id go together"},
		{[]string{"ls"}, "expected \"<subject>\""},
		{[]string{"ls", "s", "--limit=-1"}, "--limit -1"},
		{[]string{"info", "--timeout", "0s"}, "--timeout 0s"},
	} {
		code, _, errOut := runCmd(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("natsdelay %s: exit code %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, errOut, exitUsage, tc.want)
		}
	}
}

// TestAdmin_NoService_SaysSo checks that an admin command with nothing on
// the API subject says what to check instead of timing out.
func TestAdmin_NoService_SaysSo(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir(), "--engine", "memory").URL()
	code, _, errOut := runCmd(t, "info", "--nats", url, "--api-prefix", "OTHER.API")
	if code != exitRuntime || !strings.Contains(errOut, "nothing answers on OTHER.API.INFO") {
		t.Fatalf("info with another prefix: exit code %d, stderr %q", code, errOut)
	}
}

// TestServe_MicroDiscovery checks what nats micro ls, info and stats rely
// on: $SRV.PING, $SRV.INFO and $SRV.STATS answer with the service's name
// and version, and its endpoints with their subjects.
func TestServe_MicroDiscovery(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir(), "--engine", "memory").URL()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	request := func(subj string, v any) {
		t.Helper()
		m, err := nc.Request(subj, nil, 5*time.Second)
		if err != nil {
			t.Fatalf("request %s: %v", subj, err)
		}
		if err := json.Unmarshal(m.Data, v); err != nil {
			t.Fatalf("%s answered %q: %v", subj, m.Data, err)
		}
	}

	var ping micro.Ping
	request("$SRV.PING."+wire.ServiceName, &ping)
	if ping.Name != "natsdelay" || ping.Version != bridge.Version || ping.Type != micro.PingResponseType || ping.ID == "" {
		t.Fatalf("PING = %+v, want natsdelay %s", ping, bridge.Version)
	}

	want := map[string]string{
		"ingest":      "delay.>",
		"js_schedule": "$DELAY.JS.>",
		"info":        "$DELAY.API.INFO",
		"get":         "$DELAY.API.GET",
		"list":        "$DELAY.API.LIST",
		"cancel":      "$DELAY.API.CANCEL",
		"subjects":    "$DELAY.API.SUBJECTS",
		"schedules":   "$DELAY.API.SCHEDULES",
		// Flow control.
		"limits_set":    "$DELAY.API.LIMITS.SET",
		"limits_get":    "$DELAY.API.LIMITS.GET",
		"limits_list":   "$DELAY.API.LIMITS.LIST",
		"limits_delete": "$DELAY.API.LIMITS.DELETE",
		"pause":         "$DELAY.API.PAUSE",
		"resume":        "$DELAY.API.RESUME",
		// Steering many at once, and dead letters.
		"reschedule":      "$DELAY.API.RESCHEDULE",
		"fire":            "$DELAY.API.FIRE",
		"dead_list":       "$DELAY.API.DEAD.LIST",
		"dead_get":        "$DELAY.API.DEAD.GET",
		"bulk_cancel":     "$DELAY.API.BULK.CANCEL",
		"bulk_reschedule": "$DELAY.API.BULK.RESCHEDULE",
		"bulk_fire":       "$DELAY.API.BULK.FIRE",
		"bulk_replay":     "$DELAY.API.BULK.REPLAY",
		"bulk_delete":     "$DELAY.API.BULK.DELETE",
		// Recurring schedules in the operator's hands, and backup.
		"schedule_pause":   "$DELAY.API.SCHEDULE.PAUSE",
		"schedule_resume":  "$DELAY.API.SCHEDULE.RESUME",
		"schedule_trigger": "$DELAY.API.SCHEDULE.TRIGGER",
		"schedule_skip":    "$DELAY.API.SCHEDULE.SKIP",
		"schedule_edit":    "$DELAY.API.SCHEDULE.EDIT",
		"backup":           "$DELAY.API.BACKUP",
	}
	var info micro.Info
	request("$SRV.INFO."+wire.ServiceName, &info)
	got := map[string]string{}
	for _, ep := range info.Endpoints {
		got[ep.Name] = ep.Subject
	}
	if info.Name != "natsdelay" || info.Version != bridge.Version || info.ID != ping.ID || !maps.Equal(got, want) {
		t.Fatalf("INFO = %+v, endpoints %v; want natsdelay %s, id %s, endpoints %v", info.ServiceIdentity, got, bridge.Version, ping.ID, want)
	}

	// One API call, then STATS counts it on its endpoint.
	mustRun(t, "info", "--nats", url)
	var stats micro.Stats
	request("$SRV.STATS."+wire.ServiceName, &stats)
	counted := map[string]int{}
	clear(got)
	for _, ep := range stats.Endpoints {
		got[ep.Name] = ep.Subject
		counted[ep.Name] = ep.NumRequests
	}
	if stats.Name != "natsdelay" || !maps.Equal(got, want) || counted["info"] != 1 || counted["get"] != 0 {
		t.Fatalf("STATS = %+v, endpoints %v, requests %v; want the endpoints and 1 INFO request", stats.ServiceIdentity, got, counted)
	}
}

// TestAdmin_SubjectsAndLsFilter drives subjects and ls with a filter
// against a running serve: subjects lists the subjects that match, in
// order, with their pending and due counts, pages with a hint, and ls
// with a filter lists the messages of every matching subject.
func TestAdmin_SubjectsAndLsFilter(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir()).URL()
	at := []string{"--nats", url}
	// Nobody subscribes: what is due stays pending, and due.
	schedule(t, url, "shop.orders", "o1", "--delay", "1h")
	schedule(t, url, "shop.orders", "o2", "--delay", "1ms")
	schedule(t, url, "shop.refunds", "r1", "--delay", "2h")
	schedule(t, url, "shop.eu.orders", "e1", "--delay", "3h")
	schedule(t, url, "mail.out", "m1", "--delay", "1h")

	out := mustRun(t, append([]string{"subjects"}, at...)...)
	want := "SUBJECT         PENDING  DUE NOW  DEAD  HELD\n" +
		"mail.out        1        0        0     no\n" +
		"shop.eu.orders  1        0        0     no\n" +
		"shop.orders     2        1        0     no\n" +
		"shop.refunds    1        0        0     no\n" +
		"4 subjects matching >: 5 pending, 1 due now, 0 dead\n"
	if out != want {
		t.Errorf("subjects printed\n%s\nwant\n%s", out, want)
	}
	out = mustRun(t, append([]string{"subjects", "shop.*"}, at...)...)
	if !strings.Contains(out, "shop.orders ") || !strings.Contains(out, "shop.refunds ") || strings.Contains(out, "shop.eu.orders") ||
		!strings.HasSuffix(out, "2 subjects matching shop.*: 3 pending, 1 due now, 0 dead\n") {
		t.Errorf("subjects shop.* printed\n%s\nwant shop.orders and shop.refunds only", out)
	}
	if out := mustRun(t, append([]string{"subjects", "mail.*"}, at...)...); !strings.HasSuffix(out, "\n1 subject matching mail.*: 1 pending, 0 due now, 0 dead\n") {
		t.Errorf("subjects mail.* printed\n%s\nwant one subject counted in the singular", out)
	}
	out = mustRun(t, append([]string{"subjects", "shop.>", "--limit", "1"}, at...)...)
	if !strings.Contains(out, "shop.eu.orders") || strings.Contains(out, "shop.orders") || !strings.HasSuffix(out, "more: natsdelay subjects shop.> --after shop.eu.orders, or --all\n") {
		t.Errorf("subjects shop.> --limit 1 printed\n%s\nwant the first subject and how to get the next page", out)
	}
	var r wire.SubjectsReply
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"subjects", "shop.>", "--limit", "1", "--all", "--json"}, at...)...)), &r); err != nil {
		t.Fatal(err)
	}
	if r.Filter != "shop.>" || len(r.Subjects) != 3 || r.Subjects[1] != (wire.SubjectInfo{Subject: "shop.orders", Pending: 2, DueNow: 1}) || r.Next != "" {
		t.Errorf("subjects shop.> --limit 1 --all --json: %+v, want the three shop subjects, shop.orders with 2 pending and 1 due", r)
	}

	out = mustRun(t, append([]string{"ls", "shop.*"}, at...)...)
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(rows) != 5 || !strings.HasPrefix(rows[0], "SUBJECT ") || !strings.HasPrefix(rows[1], "shop.orders ") ||
		!strings.HasPrefix(rows[2], "shop.orders ") || !strings.HasPrefix(rows[3], "shop.refunds ") || rows[4] != "3 listed on 2 subjects matching shop.*" {
		t.Errorf("ls shop.* printed\n%s\nwant a header, the messages of shop.orders then shop.refunds, and a count", out)
	}
	var lr lsFilterReply
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"ls", "shop.>", "--json"}, at...)...)), &lr); err != nil {
		t.Fatal(err)
	}
	if lr.Filter != "shop.>" || len(lr.Subjects) != 3 || lr.Subjects[0].Subject != "shop.eu.orders" || len(lr.Subjects[1].Messages) != 2 {
		t.Errorf("ls shop.> --json: %+v, want three subjects in order, shop.orders with 2 messages", lr)
	}
}
