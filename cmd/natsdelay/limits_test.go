package main

import (
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"
)

// TestLimits_Commands drives the flow-control commands against a running
// serve: limits set prints the limit, ls lists the patterns most specific
// first, pause and resume flip the pattern, get prints one, rm deletes it
// and a second rm is a 404 (exit code 1).
func TestLimits_Commands(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir()).URL()
	out := mustRun(t, "limits", "set", "orders.>", "--nats", url, "--max-in-flight", "100", "--rate", "3000/m", "--burst", "100")
	for _, want := range []string{"PATTERN", "orders.>", "100", "50", "false"} {
		if !strings.Contains(out, want) {
			t.Fatalf("limits set printed %q, want %q in it", out, want)
		}
	}
	mustRun(t, "limits", "set", "orders.eu.paid", "--nats", url, "--max-in-flight", "5")
	out = mustRun(t, "limits", "ls", "--nats", url)
	if i, j := strings.Index(out, "orders.eu.paid"), strings.Index(out, "orders.>"); i < 0 || j < 0 || i > j {
		t.Fatalf("limits ls printed %q: want orders.eu.paid before orders.>", out)
	}
	if out := mustRun(t, "pause", "orders.>", "--nats", url); !strings.Contains(out, "true") {
		t.Fatalf("pause printed %q, want paused true", out)
	}
	if out := mustRun(t, "limits", "get", "orders.>", "--nats", url, "--json"); !strings.Contains(out, `"paused":true`) {
		t.Fatalf("limits get --json printed %q, want paused", out)
	}
	if out := mustRun(t, "resume", "orders.>", "--nats", url, "--json"); strings.Contains(out, `"paused":true`) {
		t.Fatalf("resume printed %q, want not paused", out)
	}
	mustRun(t, "limits", "rm", "orders.>", "--nats", url)
	if code, _, errOut := runCmd(t, "limits", "rm", "orders.>", "--nats", url); code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("a second limits rm: exit %d, %q; want 1 and a 404", code, errOut)
	}
	// A tenant's share over every subject (> by default), and a pattern
	// bounded as a whole: ls says what each bounds.
	if out := mustRun(t, "limits", "set", "--key-header", "Tenant", "--rate", "100/s", "--max-in-flight", "50", "--nats", url, "--json"); !strings.Contains(out, `{"pattern":">","max_in_flight":50,"rate":100,"key_header":"Tenant"}`) {
		t.Fatalf("limits set --key-header printed %q, want 50 in flight at 100/s of each Tenant over >", out)
	}
	mustRun(t, "limits", "set", "shop.>", "--whole", "--max-in-flight", "20", "--nats", url)
	out = mustRun(t, "limits", "ls", "--nats", url)
	if !strings.Contains(out, "> (each Tenant)") || !strings.Contains(out, "shop.> (together)") {
		t.Fatalf("limits ls printed %q, want the tenant and the whole limits marked", out)
	}
}

// Bad flow-control input is a usage error that names the flag, before
// anything is sent.
func TestLimits_BadInput_ExitsTwo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"limits", "set", "orders.>", "--rate", "50/d"}, `--rate "50/d": unit "d"`},
		{[]string{"limits", "set", "orders.>", "--rate=-3/s"}, `--rate "-3/s"`},
		{[]string{"limits", "set", "orders.>", "--max-in-flight=-1"}, "--max-in-flight -1"},
		{[]string{"limits", "set", "orders.>", "--burst", "5"}, "--burst 5: only applies with --rate"},
		{[]string{"limits", "set", "orders..x"}, `"orders..x" has an empty token`},
		{[]string{"pause", "a.>.b"}, `"a.>.b"`},
		{[]string{"limits", "set", "--whole", "--key-header", "Tenant"}, "--whole and --key-header"},
		{[]string{"limits", "set", "--max-in-flight", "5"}, "pattern"},
	} {
		code, _, errOut := runCmd(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("natsdelay %s: exit %d, %q; want %d and %q", strings.Join(c.args, " "), code, errOut, exitUsage, c.want)
		}
	}
}

// TestParse_ConfigLimits checks the limits key of the config file: a
// list of limits, each a pattern with max_in_flight, rate (a number per
// second, or a string as --rate takes it), burst and paused.
func TestParse_ConfigLimits(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, `{
		"nats_listen": "127.0.0.1:0",
		"http": "127.0.0.1:0",
		"limits": [
			{"pattern": "orders.>", "max_in_flight": 100, "rate": "3000/m", "burst": 100},
			{"pattern": "tenant.*.mail", "rate": 20},
			{"pattern": "reports.daily", "paused": true}
		]
	}`)
	s := parseServe(t, "--config", file)
	want := []wire.Limit{
		{Pattern: "orders.>", MaxInFlight: 100, Rate: 50, Burst: 100},
		{Pattern: "tenant.*.mail", Rate: 20},
		{Pattern: "reports.daily", Paused: true},
	}
	if !slices.Equal(s.limits.list, want) {
		t.Fatalf("limits from the file = %+v, want %+v", s.limits.list, want)
	}
}

// TestParse_ConfigLimits_BadValue_NamesTheKey checks that a bad limit in
// the config file is a usage error that names the file, the key, the
// element and what is wrong with it, before anything starts.
func TestParse_ConfigLimits_BadValue_NamesTheKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, limits, want string
	}{
		{"not a list", `{"pattern": "a"}`, `key "limits": got an object: want a list of limits such as [{"pattern": "orders.>", "rate": "50/s"}]`},
		{"unknown field", `[{"pattern": "a", "rte": 5}]`, `key "limits", element 0 (pattern "a"): unknown field "rte": the fields are pattern, max_in_flight, rate, burst, paused`},
		{"wrong type", `[{"pattern": "a", "max_in_flight": "many"}]`, `key "limits", element 0 (pattern "a"): "max_in_flight" "many": want a whole number`},
		{"bad rate", `[{"pattern": "a"}, {"pattern": "b", "rate": "5/d"}]`, `key "limits", element 1 (pattern "b"): "rate" "5/d": unit "d": want s, m or h, such as 50/s`},
		{"rate not a rate", `[{"pattern": "b", "rate": true}]`, `key "limits", element 0 (pattern "b"): "rate" true: want a number per second, or a string such as "50/s"`},
		{"bad pattern", `[{"pattern": "orders..x", "rate": 5}]`, `key "limits", element 0 (pattern "orders..x"): "pattern" "orders..x" has an empty token`},
		{"no pattern", `[{"rate": 5}]`, `key "limits", element 0: "pattern" is required`},
		{"over the window", `[{"pattern": "a", "max_in_flight": 70000}]`, `key "limits", element 0 (pattern "a"): "max_in_flight" 70000: want 1 to the in-flight window, 65536`},
		{"negative rate", `[{"pattern": "a", "rate": -1}]`, `"rate" -1: want messages per second`},
		{"burst without rate", `[{"pattern": "a", "burst": 5}]`, `"burst" 5 without "rate"`},
		{"twice", `[{"pattern": "a", "rate": 1}, {"pattern": "a", "rate": 2}]`, `key "limits", element 1 (pattern "a"): given twice, first as element 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := writeConfig(t, `{"nats_listen": "127.0.0.1:0", "http": "127.0.0.1:0", "limits": `+tc.limits+`}`)
			_, _, err := parse([]string{"--config", file}, io.Discard, io.Discard)
			if !errors.Is(err, usage.ErrUsage) || !strings.Contains(err.Error(), "config file "+file) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parse: %v\nwant a usage error naming the file and %q", err, tc.want)
			}
		})
	}
}

// TestServe_ConfigLimits_SeededNotOverriding checks the rule of limits in
// the config file: at start each is stored if its pattern has no stored
// limit, and a limit changed through the API since is kept across a
// restart, while one removed through the API comes back from the file.
func TestServe_ConfigLimits_SeededNotOverriding(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := writeConfig(t, `{"limits": [
		{"pattern": "orders.>", "max_in_flight": 100, "rate": "50/s"},
		{"pattern": "mail.*", "paused": true}
	]}`)
	first := serveInProcess(t, dir, "--config", file)
	at := []string{"--nats", first.URL()}
	out := mustRun(t, append([]string{"limits", "ls"}, at...)...)
	if !regexp.MustCompile(`(?m)^orders\.>\s+100\s+50\s+default\s+false$`).MatchString(out) || !regexp.MustCompile(`(?m)^mail\.\*\s+default\s+none\s+default\s+true$`).MatchString(out) {
		t.Fatalf("limits ls after a start with limits in the config file printed\n%s\nwant both", out)
	}
	mustRun(t, append([]string{"limits", "set", "orders.>", "--rate", "10/s"}, at...)...)
	mustRun(t, append([]string{"limits", "rm", "mail.*"}, at...)...)
	if err := first.Close(); err != nil {
		t.Fatalf("first serve: Close: %v", err)
	}

	url := serveInProcess(t, dir, "--config", file).URL()
	var r wire.LimitsReply
	if err := json.Unmarshal([]byte(mustRun(t, "limits", "ls", "--json", "--nats", url)), &r); err != nil {
		t.Fatal(err)
	}
	want := []wire.Limit{{Pattern: "mail.*", Paused: true}, {Pattern: "orders.>", Rate: 10}}
	if !slices.Equal(r.Limits, want) {
		t.Fatalf("limits after a restart = %+v, want %+v: the API's change kept, the removed one seeded again", r.Limits, want)
	}
}
