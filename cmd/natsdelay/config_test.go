package main

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"
)

// writeConfig writes a config file for the test and returns its path.
func writeConfig(t testing.TB, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "natsdelay.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// parseServe parses args and returns the serve settings they select.
func parseServe(t testing.TB, args ...string) *serveCmd {
	t.Helper()
	c, kctx, err := parse(args, io.Discard, io.Discard)
	if err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	if got := kctx.Selected().Name; got != "serve" {
		t.Fatalf("parse %q selected %q, want serve", args, got)
	}
	return &c.Serve
}

// TestParse_NoCommand_IsServeWithDefaults checks that a bare natsdelay is
// serve with the documented defaults.
func TestParse_NoCommand_IsServeWithDefaults(t *testing.T) {
	for _, args := range [][]string{{}, {"serve"}} {
		// NB: the default port may be taken on the machine running the
		// tests, so only the address is moved; its default is checked below.
		s := parseServe(t, append(args, "--nats-listen", "127.0.0.1:0")...)
		want := serveCmd{
			NATSListen: "127.0.0.1:0", DataDir: defaultDataDir, Engine: "pebble", AckWait: 30 * time.Second,
			IngestPrefix: "delay", AckPrefix: "$DELAY.ACK", APIPrefix: "$DELAY.API", ExpiryInterval: time.Second,
		}
		s.Backoff = nil
		if !s.equal(want) {
			t.Errorf("parse %q = %+v, want %+v", args, *s, want)
		}
	}
	if got := (&serveCmd{}).listen(); got != "127.0.0.1:4222" {
		t.Errorf("default listen address %q, want 127.0.0.1:4222", got)
	}
}

// equal compares the settings that the tests set.
func (c *serveCmd) equal(o serveCmd) bool {
	return c.NATS == o.NATS && c.NATSListen == o.NATSListen && c.DataDir == o.DataDir && c.Engine == o.Engine &&
		c.TimeBucket == o.TimeBucket && c.AckWait == o.AckWait && c.MaxDeliver == o.MaxDeliver &&
		slices.Equal(c.Backoff, o.Backoff) && c.DeadLetter == o.DeadLetter && c.DeadLetterExp == o.DeadLetterExp &&
		c.IngestPrefix == o.IngestPrefix && c.AckPrefix == o.AckPrefix && c.APIPrefix == o.APIPrefix &&
		c.MaxPayload == o.MaxPayload && c.ExpiryInterval == o.ExpiryInterval
}

// TestParse_Precedence checks flag > env > config file > default, one
// setting per layer, and that the file may be named by env or flag.
func TestParse_Precedence(t *testing.T) {
	file := writeConfig(t, `{
		"data_dir": "from-file",
		"engine": "memory",
		"ack-wait": "10s",
		"max_deliver": 3,
		"backoff": ["1s", "5s"],
		"dead_letter_expired": true,
		"max_payload": 2048,
		"nats_listen": "127.0.0.1:0"
	}`)

	s := parseServe(t, "--config", file)
	want := serveCmd{
		NATSListen: "127.0.0.1:0", DataDir: "from-file", Engine: "memory", AckWait: 10 * time.Second, MaxDeliver: 3,
		Backoff: []time.Duration{time.Second, 5 * time.Second}, DeadLetterExp: true, MaxPayload: 2048,
		IngestPrefix: "delay", AckPrefix: "$DELAY.ACK", APIPrefix: "$DELAY.API", ExpiryInterval: time.Second,
	}
	if !s.equal(want) {
		t.Fatalf("file only: %+v, want %+v", *s, want)
	}

	// Env beats the file, and may name the file itself.
	t.Setenv("NATSDELAY_CONFIG", file)
	t.Setenv("NATSDELAY_ENGINE", "bolt")
	t.Setenv("NATSDELAY_ACK_WAIT", "20s")
	t.Setenv("NATSDELAY_BACKOFF", "2s")
	s = parseServe(t)
	want.Engine, want.AckWait, want.Backoff = "bolt", 20*time.Second, []time.Duration{2 * time.Second}
	if !s.equal(want) {
		t.Fatalf("env over file: %+v, want %+v", *s, want)
	}

	// A flag beats both.
	s = parseServe(t, "--ack-wait", "40s", "--engine", "pebble", "--data-dir", "from-flag")
	want.AckWait, want.Engine, want.DataDir = 40*time.Second, "pebble", "from-flag"
	if !s.equal(want) {
		t.Fatalf("flag over env: %+v, want %+v", *s, want)
	}
}

// TestParse_Client_SharesConnectionSettings checks that pub and sub take
// --nats from env and file like serve, with their own default, and that
// per-message flags stay off the file.
func TestParse_Client_SharesConnectionSettings(t *testing.T) {
	c, _, err := parse([]string{"pub", "a.b", "--delay", "1s"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Pub.NATS != "" || c.Pub.nctx.ServerURL() != defaultClientURL || c.Pub.Delay != "1s" || c.Pub.IngestPrefix != "delay" {
		t.Fatalf("pub defaults: nats %q (URL %q), delay %q, ingest prefix %q", c.Pub.NATS, c.Pub.nctx.ServerURL(), c.Pub.Delay, c.Pub.IngestPrefix)
	}
	file := writeConfig(t, `{"nats": "nats://from-file:4222", "ingest_prefix": "later", "data_dir": "ignored-by-sub"}`)
	c, _, err = parse([]string{"sub", "a.b", "--config", file}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sub.NATS != "nats://from-file:4222" {
		t.Fatalf("sub --nats from file = %q", c.Sub.NATS)
	}
	t.Setenv("NATSDELAY_NATS", "nats://from-env:4222")
	c, _, err = parse([]string{"pub", "a.b", "--config", file}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Pub.NATS != "nats://from-env:4222" || c.Pub.IngestPrefix != "later" {
		t.Fatalf("pub: nats %q (want from env), ingest prefix %q (want from file)", c.Pub.NATS, c.Pub.IngestPrefix)
	}
	_, _, err = parse([]string{"pub", "a.b", "--config", writeConfig(t, `{"delay": "1s"}`)}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `unknown key "delay"`) {
		t.Fatalf("delay in a config file: err %v, want unknown key", err)
	}
}

// TestParse_BadValue_ClearUsageError checks that every bad setting is a
// usage error (exit code 2) that names the flag, the value and what is
// accepted.
// TestParse_Defaults_WhileTheirPortsAreTaken checks that settings are
// judged apart from the machine: serve's defaults parse while another
// natsdelay (the README's own) holds 127.0.0.1:4222 and 127.0.0.1:7070.
// Serve probes its ports when it starts (TestServe_PortInUse_ExitsWithHint,
// TestServe_HTTPPortInUse_ExitsWithHint).
func TestParse_Defaults_WhileTheirPortsAreTaken(t *testing.T) {
	for _, addr := range []string{defaultListen, defaultHTTP} {
		// NB: if the bind fails, something else holds the port: taken
		// either way.
		if ln, err := net.Listen("tcp", addr); err == nil {
			defer ln.Close()
		}
	}
	if _, _, err := parse(nil, io.Discard, io.Discard); err != nil {
		t.Fatalf("parse of the defaults with their ports taken: %v", err)
	}
}

func TestParse_BadValue_ClearUsageError(t *testing.T) {
	// Building the parser takes a quarter of a second of CPU under the
	// race detector, and there are 60 cases: they run beside the
	// package's other parallel tests, not before them. The cases of
	// environment variables, which t.Setenv sets for the whole process,
	// are TestParse_BadEnv_ClearUsageError.
	t.Parallel()
	tests := []struct {
		name string
		args []string
		file string // config file content, passed with --config
		want []string
	}{
		{name: "bad engine", args: []string{"--engine", "rocks"}, want: []string{"--engine", `"rocks"`, "pebble, bolt, memory"}},
		{name: "bad engine with other problems", args: []string{"--engine", "rocks", "--max-payload=-1"}, want: []string{`--engine "rocks"`, "pebble, bolt, memory", "--max-payload -1"}},
		{name: "bad duration", args: []string{"--ack-wait", "30x"}, want: []string{"--ack-wait", `"30x"`, "Go duration such as"}},
		{name: "bare number duration", args: []string{"--expiry-interval", "5"}, want: []string{"--expiry-interval", `"5"`, "Go duration"}},
		{name: "bad backoff list", args: []string{"--backoff", "1s,soon"}, want: []string{"--backoff", `"soon"`, "Go duration"}},
		{name: "negative backoff", args: []string{"--backoff=1s,-2s"}, want: []string{"--backoff 1s,-2s", "value 2 (-2s)", ">= 0"}},
		{name: "negative max payload", args: []string{"--max-payload=-1"}, want: []string{"--max-payload -1", "must be > 0"}},
		{name: "zero ack wait", args: []string{"--ack-wait", "0s"}, want: []string{"--ack-wait 0s", "other than 0"}},
		{name: "time bucket not whole ms", args: []string{"--time-bucket", "1500us"}, want: []string{"--time-bucket 1.5ms", "whole number of milliseconds"}},
		{name: "max deliver too big", args: []string{"--max-deliver", "4294967296"}, want: []string{"--max-deliver 4294967296", "4294967295"}},
		{name: "wildcard prefix", args: []string{"--ingest-prefix", "delay.*"}, want: []string{"--ingest-prefix", `"delay.*"`, "wildcards"}},
		{name: "empty ack prefix", args: []string{"--ack-prefix", ""}, want: []string{`--ack-prefix ""`, "$DELAY.ACK"}},
		{name: "wildcard dead letter", args: []string{"--dead-letter", "dead.>"}, want: []string{"--dead-letter", `"dead.>"`}},
		{name: "port out of range", args: []string{"--nats-listen", "127.0.0.1:70000"}, want: []string{"--nats-listen", `"70000"`, "65535"}},
		{name: "listen and url", args: []string{"--nats", "nats://127.0.0.1:4222", "--nats-listen", "127.0.0.1:5222"}, want: []string{"--nats-listen", "only applies to the embedded"}},
		{name: "jetstream with url", args: []string{"--nats", "nats://127.0.0.1:4222", "--nats-jetstream"}, want: []string{"--nats-jetstream", "only applies to the embedded", "enable JetStream in that server"}},
		{name: "bad url scheme", args: []string{"--nats", "http://127.0.0.1:4222"}, want: []string{"--nats", `"http://127.0.0.1:4222"`, "nats://"}},
		{name: "auth without url", args: []string{"--token", "s3cret"}, want: []string{"--token", "only apply with --nats"}},
		{name: "missing creds file", args: []string{"--nats", "nats://h:4222", "--creds", "no-such.creds"}, want: []string{"--creds", `"no-such.creds"`}},
		{name: "cert without key", args: []string{"--nats", "nats://h:4222", "--tls-cert", "main.go"}, want: []string{"--tls-cert and --tls-key"}},
		{name: "data dir is a file", args: []string{"--data-dir", "main.go"}, want: []string{"--data-dir", `"main.go"`, "want a directory"}},
		{name: "bad fleet flags", args: []string{"--cell", "a.b", "--partitions", "70000", "--fleet-cells", "x,x"},
			want: []string{`--cell "a.b"`, "--partitions 70000: want 1 to 65536", `--fleet-cells x,x: founding cell "x": given twice`, `cell "a.b" is not one of the founding cells`}},
		{name: "fleet flags without a cell", args: []string{"--partitions", "16"}, want: []string{"--partitions and --fleet-cells", "give --cell"}},
		{name: "every bad value at once", args: []string{"--backoff", "1s,x", "--ack-wait", "30x", "--engine", "foo", "--time-bucket", "1500us"},
			want: []string{"--backoff", `"x"`, "--ack-wait", `"30x"`, `--engine "foo"`, "--time-bucket 1.5ms"}},
		{name: "unknown config key", file: `{"ack_wiat": "1s"}`, want: []string{`unknown key "ack_wiat"`, "ack_wait"}},
		{name: "bad config value", file: `{"ack_wait": "1x"}`, want: []string{"--ack-wait", "config file", `"ack_wait"`, `"1x"`}},
		{name: "bad config enum", file: `{"log_level": "loud"}`, want: []string{"log_level", `"loud"`, "debug, info, warn, error"}},
		{name: "config object value", file: `{"data_dir": {"path": "x"}}`, want: []string{`"data_dir"`, "an object", "want a string"}},
		{name: "config not an object", file: `["ack_wait"]`, want: []string{"config file", "one JSON object"}},
		{name: "config file missing", args: []string{"--config", "no-such.json"}, want: []string{"no-such.json"}},
		{name: "pub delay and at", args: []string{"pub", "a.b", "--delay", "1s", "--at", "2026-01-01T00:00:00Z"}, want: []string{"--delay and --at"}},
		{name: "pub bad header", args: []string{"pub", "a.b", "-H", "novalue"}, want: []string{"--header", `"novalue"`, "K:V"}},
		{name: "pub debounce without id", args: []string{"pub", "a.b", "--debounce", "30s"}, want: []string{"--debounce needs --id"}},
		{name: "pub debounce with delay", args: []string{"pub", "a.b", "--debounce", "30s", "--id", "x", "--delay", "1s"}, want: []string{"--debounce sets the fire time"}},
		{name: "pub debounce max alone", args: []string{"pub", "a.b", "--debounce-max", "5m"}, want: []string{"--debounce-max goes with --debounce"}},
		{name: "pub throttle without id", args: []string{"pub", "a.b", "--throttle", "1m"}, want: []string{"--throttle needs --id"}},
		{name: "pub throttle with at", args: []string{"pub", "a.b", "--throttle", "1m", "--id", "x", "--at", "1800000000"}, want: []string{"--throttle sets the fire time"}},
		{name: "pub throttle with debounce", args: []string{"pub", "a.b", "--throttle", "1m", "--id", "x", "--debounce", "1m"}, want: []string{"--throttle and --debounce"}},
		{name: "pub bad ack", args: []string{"pub", "a.b", "--ack", "sometimes"}, want: []string{"--ack", `"sometimes"`}},
		{name: "sub negative count", args: []string{"sub", "a.b", "--count=-1"}, want: []string{"--count -1"}},
		{name: "negative duration", args: []string{"--ack-wait", "-1s"}, want: []string{"--ack-wait -1s", "must be > 0"}},
		{name: "negative duration list", args: []string{"--backoff", "-1s"}, want: []string{"--backoff -1s", ">= 0"}},
		{name: "pub empty subject", args: []string{"pub", "", "x"}, want: []string{"subject is empty", "orders.reminder"}},
		{name: "pub wildcard subject", args: []string{"pub", "a.*", "x"}, want: []string{`subject "a.*" has a wildcard`}},
		{name: "pub empty token", args: []string{"pub", "a..b", "x"}, want: []string{`subject "a..b" has an empty token`}},
		{name: "sub bad filter", args: []string{"sub", "a.>.b"}, want: []string{`subject "a.>.b"`, "whole token"}},
		{name: "ls filter after", args: []string{"ls", "a.*", "--after", "abc"}, want: []string{"--after abc", `"a.*" is a filter`}},
		{name: "ls bad filter", args: []string{"ls", "a.>.b"}, want: []string{`subject "a.>.b"`, "whole token"}},
		{name: "subjects bad filter", args: []string{"subjects", "a..b"}, want: []string{`filter "a..b" has an empty token`}},
		{name: "cancel space subject", args: []string{"cancel", "--subject", "a b", "--id", "x"}, want: []string{`--subject "a b"`, "white space"}},
		{name: "cancel nothing", args: []string{"cancel"}, want: []string{"cancel: which message? natsdelay cancel TAG, or natsdelay cancel --subject SUBJECT --id ID"}},
		{name: "get nothing", args: []string{"get"}, want: []string{"get: which message? natsdelay get TAG"}},
		// A node of a cluster that could not make one cluster with its
		// peers is refused before it starts anything: never a split brain.
		{name: "cluster peers without self", args: []string{"--cluster-listen", "127.0.0.1:7001", "--cluster-peers", "127.0.0.1:7002,127.0.0.1:7003", "--node-id", "a"},
			want: []string{"--cluster-peers 127.0.0.1:7002,127.0.0.1:7003", "does not list this node's own address 127.0.0.1:7001"}},
		{name: "cluster peer twice", args: []string{"--cluster-listen", "127.0.0.1:7001", "--cluster-peers", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7002", "--node-id", "a"},
			want: []string{"--cluster-peers", `"127.0.0.1:7002" is listed twice`}},
		{name: "cluster memory engine", args: []string{"--engine", "memory", "--cluster-listen", "127.0.0.1:7001", "--cluster-peers", "127.0.0.1:7001", "--node-id", "a"},
			want: []string{"--engine memory", "a node of a cluster needs a store on disk"}},
		{name: "cluster without node id", args: []string{"--cluster-listen", "127.0.0.1:7001", "--cluster-peers", "127.0.0.1:7001"},
			want: []string{`--node-id ""`, "unique in the cluster"}},
		{name: "cluster bad node id", args: []string{"--cluster-listen", "127.0.0.1:7001", "--cluster-peers", "127.0.0.1:7001", "--node-id", "a b"},
			want: []string{`--node-id "a b"`, "letters, digits"}},
		{name: "cluster without listen", args: []string{"--cluster-peers", "127.0.0.1:7001", "--node-id", "a"},
			want: []string{`--cluster-listen ""`, "Raft transport"}},
		{name: "cluster without peers", args: []string{"--cluster-listen", "127.0.0.1:7001", "--node-id", "a"},
			want: []string{"--cluster-peers", "every member's cluster address"}},
		{name: "cluster unspecified listen", args: []string{"--cluster-listen", "0.0.0.0:7001", "--cluster-peers", "0.0.0.0:7001", "--node-id", "a"},
			want: []string{`--cluster-listen "0.0.0.0:7001" binds every interface`, "--cluster-advertise"}},
		{name: "cluster timeout too short", args: []string{"--cluster-listen", "127.0.0.1:7001", "--cluster-peers", "127.0.0.1:7001", "--node-id", "a", "--cluster-timeout", "10ms"},
			want: []string{"--cluster-timeout 10ms", "at least 50ms"}},
		{name: "nats routes with url", args: []string{"--nats", "nats://127.0.0.1:4222", "--nats-cluster-listen", "127.0.0.1:6222", "--nats-routes", "nats://127.0.0.1:6223"},
			want: []string{"--nats-routes only apply to the embedded"}},
		{name: "nats routes without listen", args: []string{"--nats-routes", "nats://127.0.0.1:6223"},
			want: []string{"--nats-routes nats://127.0.0.1:6223", "needs --nats-cluster-listen"}},
		// Whoever reaches a cluster port can replace the data: off the
		// loopback, a node needs TLS or says the network is closed.
		{name: "cluster on a network without TLS", args: []string{"--cluster-listen", "10.0.0.1:7001", "--cluster-peers", "10.0.0.1:7001,10.0.0.2:7001", "--node-id", "a"},
			want: []string{"cluster address 10.0.0.1:7001 is not a loopback address", "--cluster-tls-cert", "--cluster-insecure"}},
		{name: "cluster bound to every interface without TLS", args: []string{"--cluster-listen", "0.0.0.0:7001", "--cluster-advertise", "127.0.0.1:7001", "--cluster-peers", "127.0.0.1:7001", "--node-id", "a"},
			want: []string{"cluster address 0.0.0.0:7001 is not a loopback address"}},
		{name: "cluster TLS incomplete", args: []string{"--cluster-listen", "127.0.0.1:7001", "--cluster-peers", "127.0.0.1:7001", "--node-id", "a", "--cluster-tls-cert", "a.pem"},
			want: []string{"--cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca go together"}},
		{name: "cluster TLS and insecure", args: []string{"--cluster-listen", "127.0.0.1:7001", "--cluster-peers", "127.0.0.1:7001", "--node-id", "a",
			"--cluster-tls-cert", "a.pem", "--cluster-tls-key", "a-key.pem", "--cluster-tls-ca", "ca.pem", "--cluster-insecure"},
			want: []string{"--cluster-insecure with --cluster-tls-*: choose one"}},
		{name: "cluster certs bad node id", args: []string{"cluster", "certs", "a b"}, want: []string{`node id "a b"`}},
		{name: "nats bad route", args: []string{"--nats-cluster-listen", "127.0.0.1:0", "--nats-routes", "http://x"},
			want: []string{`--nats-routes "http://x"`, "nats://10.0.0.2:6222"}},
		{name: "every problem at once", args: []string{"--ack-wait", "0s", "--max-payload=-1"}, want: []string{"--ack-wait 0s", "--max-payload -1"}},
		{name: "every setting problem at once", args: []string{"--backoff=-1s", "--time-bucket=1500us", "--expiry-interval=-1s", "--max-in-flight=-1", "--dead-letter=a.*", "--http", "127.0.0.1:x"},
			want: []string{"--backoff -1s", "--time-bucket 1.5ms", "--expiry-interval -1s", "--max-in-flight -1", `--dead-letter "a.*"`, `--http "127.0.0.1:x"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wantUsageError(t, tt.args, tt.file, tt.want)
		})
	}
}

// wantUsageError checks that parsing args, with the config file of
// content file if not empty, fails with a usage error, exit code 2, that
// says each of want. A serve command line gets a free listen address.
func wantUsageError(t *testing.T, args []string, file string, want []string) {
	t.Helper()
	free := []string{"--nats-listen", "127.0.0.1:0"}
	if len(args) == 0 || !slices.Contains([]string{"pub", "sub", "ls", "get", "cancel", "subjects", "cluster"}, args[0]) {
		if !slices.Contains(args, "--nats-listen") && !slices.Contains(args, "--nats") {
			args = append(slices.Clone(free), args...)
		}
	}
	if file != "" {
		args = append(args, "--config", writeConfig(t, file))
	}
	_, _, err := parse(args, io.Discard, io.Discard)
	if err == nil {
		t.Fatalf("parse %q: no error", args)
	}
	if !errors.Is(err, usage.ErrUsage) {
		t.Errorf("parse %q: %v is not a usage error", args, err)
	}
	if code := fail(io.Discard, err); code != exitUsage {
		t.Errorf("exit code %d, want %d", code, exitUsage)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// TestParse_BadEnv_ClearUsageError is TestParse_BadValue_ClearUsageError
// for bad values in environment variables.
func TestParse_BadEnv_ClearUsageError(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{name: "bad env", env: map[string]string{"NATSDELAY_MAX_DELIVER": "lots"}, want: []string{"--max-deliver", "NATSDELAY_MAX_DELIVER", `"lots"`}},
		{name: "bad duration env", env: map[string]string{"NATSDELAY_ACK_WAIT": "1x"}, want: []string{"--ack-wait", "NATSDELAY_ACK_WAIT", `"1x"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			wantUsageError(t, nil, "", tt.want)
		})
	}
}

// TestRedact_HidesSecrets checks that URLs are logged without passwords
// or tokens.
func TestRedact_HidesSecrets(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                   "nats://127.0.0.1:4222",
		"nats://alice:s3cret@h:4222":              "nats://alice:xxxxx@h:4222",
		"nats://t0ken@h:4222,nats://b:pw@h2:4222": "nats://redacted@h:4222,nats://b:xxxxx@h2:4222",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestExpandDays checks the days that pub's --delay and --ttl take on top
// of what the service takes: whole days first, then a Go duration.
func TestExpandDays(t *testing.T) {
	for _, tt := range []struct {
		in, want, err string
	}{
		{in: "7d", want: "168h0m0s"},
		{in: "1d12h", want: "36h0m0s"},
		{in: "0d90s", want: "1m30s"},
		{in: "90s", want: "90s"},   // no days: as it is
		{in: "1500", want: "1500"}, // milliseconds: as it is
		{in: "100y", want: "100y"}, // no days: the service says what it takes
		{in: "1.5d", err: "whole days"},
		{in: "d", err: "whole days"},
		{in: "-1d", err: "whole days"},
		{in: "1d-1h", err: "whole days"},
		{in: "1d2d", err: "whole days"},
		{in: "200000d", err: "too large"},
		{in: "106751d23h47m16.854775807s", want: "2562047h47m16.854775807s"},
		{in: "106751d23h47m17s", err: "too large"},
	} {
		got, err := expandDays(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("expandDays(%q) = %q, %v; want an error saying %q", tt.in, got, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("expandDays(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// TestParse_ClusterSettings_FlagEnvFile checks that the cluster settings
// come from flags, env vars and the config file alike, the file's lists
// as arrays, with the same precedence as every other setting.
func TestParse_ClusterSettings_FlagEnvFile(t *testing.T) {
	file := writeConfig(t, `{
		"nats_listen": "127.0.0.1:0",
		"cluster_listen": "127.0.0.1:7001",
		"cluster_peers": ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"],
		"node_id": "from-file",
		"cluster_timeout": "2s"
	}`)
	if s := parseServe(t, "--nats-listen", "127.0.0.1:0"); s.clustered() {
		t.Fatalf("no cluster setting, yet clustered: %+v", s.clusterFlags)
	}
	s := parseServe(t, "--config", file)
	if s.ClusterListen != "127.0.0.1:7001" || !slices.Equal(s.ClusterPeers, []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}) ||
		s.NodeID != "from-file" || s.ClusterTimeout != 2*time.Second || !s.clustered() {
		t.Fatalf("from the file: %+v", s.clusterFlags)
	}
	t.Setenv("NATSDELAY_NODE_ID", "from-env")
	t.Setenv("NATSDELAY_CLUSTER_PEERS", "127.0.0.1:7001,127.0.0.1:7004")
	s = parseServe(t, "--config", file)
	if s.NodeID != "from-env" || !slices.Equal(s.ClusterPeers, []string{"127.0.0.1:7001", "127.0.0.1:7004"}) {
		t.Fatalf("env over file: %+v", s.clusterFlags)
	}
	s = parseServe(t, "--config", file, "--node-id", "from-flag")
	if s.NodeID != "from-flag" {
		t.Fatalf("flag over env: %+v", s.clusterFlags)
	}
}

// TestParse_BadValue_NamesNoGoField checks that a bad setting is told in
// the words of the command line: the flag and the value the user wrote,
// never the name of the Go field behind it.
func TestParse_BadValue_NamesNoGoField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--engine", "rocks"}, `--engine "rocks": must be one of pebble, bolt, memory`},
		{[]string{"--dead-letter", "dlq.*"}, `--dead-letter "dlq.*": must be a concrete subject without wildcards`},
		{[]string{"--backoff=1s,-2s"}, `--backoff 1s,-2s: value 2 (-2s) must be >= 0`},
		{[]string{"--max-in-flight=-1"}, `--max-in-flight -1: must be > 0`},
	} {
		_, _, err := parse(append([]string{"--nats-listen", "127.0.0.1:0"}, tc.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want it to say %q", tc.args, err, tc.want)
		}
		for _, field := range []string{"Engine (", "DeadLetterSubject", "Backoff[", "MaxInFlight"} {
			if err != nil && strings.Contains(err.Error(), field) {
				t.Errorf("%q: %v names the Go field %s", tc.args, err, field)
			}
		}
	}
}

// TestParse_ConfigFile_ServeTakesOnlyItsKeys checks that serve's config
// file takes only serve's settings: a bench-only key is an unknown key,
// and the error lists serve's keys only. A client command still takes a
// file written for serve (NATSDELAY_CONFIG set for both).
func TestParse_ConfigFile_ServeTakesOnlyItsKeys(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, `{"waves": 3, "quick": true}`)
	var err error
	for _, cmd := range [][]string{{"serve"}, {}} {
		_, _, err = parse(append(cmd, "--nats-listen", "127.0.0.1:0", "--config", file), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), `unknown key "quick", "waves"`) {
			t.Fatalf("%q with bench keys: %v, want them refused", cmd, err)
		}
	}
	_, list, _ := strings.Cut(err.Error(), "the keys are flag names: ")
	keys := strings.Split(list, ", ")
	if !slices.Contains(keys, "ack_wait") || slices.Contains(keys, "waves") || slices.Contains(keys, "recur_schedules") {
		t.Fatalf("serve's unknown-key error lists %q, want serve's keys only", keys)
	}
	serveFile := writeConfig(t, `{"ack_wait": "5s", "nats": "nats://127.0.0.1:4222"}`)
	if _, _, err := parse([]string{"info", "--config", serveFile}, io.Discard, io.Discard); err != nil {
		t.Fatalf("info with serve's config file: %v", err)
	}
}

// TestParse_Events_FlagEnvFile checks that lifecycle events are off by
// default and are turned on, with their prefix, by the flag, the env var
// or the config file alike, down to the service's config.
func TestParse_Events_FlagEnvFile(t *testing.T) {
	apply := func(s *serveCmd) bridge.Config {
		t.Helper()
		if err := s.check(); err != nil {
			t.Fatalf("check: %v", err)
		}
		var b bridge.Config
		s.apply(&b)
		return b
	}
	if b := apply(parseServe(t, "--nats-listen", "127.0.0.1:0", "--engine", "memory")); b.Events || b.EventPrefix != "$DELAY.EVENT" {
		t.Fatalf("by default: Events %v, EventPrefix %q; want off, $DELAY.EVENT", b.Events, b.EventPrefix)
	}
	file := writeConfig(t, `{"nats_listen": "127.0.0.1:0", "engine": "memory", "events": true, "event_prefix": "$AUDIT.EV"}`)
	if b := apply(parseServe(t, "--config", file)); !b.Events || b.EventPrefix != "$AUDIT.EV" {
		t.Fatalf("from the file: Events %v, EventPrefix %q", b.Events, b.EventPrefix)
	}
	if b := apply(parseServe(t, "--nats-listen", "127.0.0.1:0", "--engine", "memory", "--events", "--event-prefix", "ev")); !b.Events || b.EventPrefix != "ev" {
		t.Fatalf("from the flags: Events %v, EventPrefix %q", b.Events, b.EventPrefix)
	}
	t.Setenv("NATSDELAY_EVENTS", "true")
	if b := apply(parseServe(t, "--nats-listen", "127.0.0.1:0", "--engine", "memory")); !b.Events {
		t.Fatal("NATSDELAY_EVENTS=true: events off")
	}
	_, _, err := parse([]string{"--nats-listen", "127.0.0.1:0", "--engine", "memory", "--event-prefix", "a.*"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `--event-prefix "a.*"`) {
		t.Fatalf("a wildcard event prefix: %v, want an error naming --event-prefix", err)
	}
}
