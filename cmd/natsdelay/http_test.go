package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// httpGet fetches url and returns the status code and body.
func httpGet(t testing.TB, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// waitStatus polls url until it answers code, for up to 15s, and returns
// that answer's body.
func waitStatus(t testing.TB, url string, code int) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, body := httpGet(t, url)
		if got == code {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: still %d %q after 15s, want %d", url, got, body, code)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, bounded by the deadline
	}
}

// scrape fetches /metrics and returns the value of each counter and gauge
// by name, for metrics without labels, parsed as Prometheus parses them.
func scrape(t testing.TB, base string) map[string]float64 {
	t.Helper()
	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) > 0 {
				continue
			}
			switch {
			case m.Counter != nil:
				out[name] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestServe_HTTP_MetricsAndHealth checks the HTTP listener of a running
// serve: /metrics parses and counts a scheduled message along with the Go
// and process metrics, /healthz and /readyz answer 200, and the server
// stops cleanly with the listener open.
func TestServe_HTTP_MetricsAndHealth(t *testing.T) {
	t.Parallel()
	srv := serveInProcess(t, t.TempDir())
	url, base := srv.URL(), srv.httpURL()

	before := scrape(t, base)
	for _, name := range []string{"natsdelay_messages_scheduled_total", "natsdelay_messages_pending", "go_goroutines", "process_start_time_seconds"} {
		if _, ok := before[name]; !ok {
			t.Fatalf("/metrics has no %s", name)
		}
	}
	pub := start(t, "pub", "metrics.check", "x", "--delay", "1h", "--nats", url)
	if code := pub.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("pub exit code %d", code)
	}
	// The reply comes after the commit, and the counter moves at the commit.
	after := scrape(t, base)
	if d := after["natsdelay_messages_scheduled_total"] - before["natsdelay_messages_scheduled_total"]; d != 1 {
		t.Fatalf("natsdelay_messages_scheduled_total moved by %v after one pub, want 1", d)
	}
	if after["natsdelay_messages_pending"] != 1 {
		t.Fatalf("natsdelay_messages_pending %v, want 1", after["natsdelay_messages_pending"])
	}

	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q, want 200 ok", code, body)
	}
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %q, want 200", code, body)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close with the listener open: %v", err)
	}
}

// TestServe_HTTP_ReadyzFollowsNATS checks that /readyz turns 503, with the
// reason, when the NATS server serve uses goes away, while /healthz stays
// 200: the process is alive but cannot take or deliver messages. /readyz
// turns 200 again once NATS is back.
func TestServe_HTTP_ReadyzFollowsNATS(t *testing.T) {
	t.Parallel()
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	ns := natsserver.RunServer(&opts)
	t.Cleanup(ns.Shutdown)

	srv := openServe(t, "--nats", ns.ClientURL(), "--engine", "memory")
	base := srv.httpURL()
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz with NATS up: %d %q, want 200", code, body)
	}

	port := ns.Addr().(*net.TCPAddr).Port
	ns.Shutdown()
	ns.WaitForShutdown()
	body := waitStatus(t, base+"/readyz", http.StatusServiceUnavailable)
	if !strings.Contains(body, "not connected to NATS") {
		t.Fatalf("/readyz 503 body %q, want the reason", body)
	}
	if code, _ := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with NATS down: %d, want 200", code)
	}

	// NB: a stop while NATS is down waits for the drain of each
	// subscription to time out, so bring NATS back before stopping; the
	// service is ready again once it has reconnected.
	opts.Port = port
	ns = natsserver.RunServer(&opts)
	t.Cleanup(ns.Shutdown)
	waitStatus(t, base+"/readyz", http.StatusOK)
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestServe_HTTPPortInUse_ExitsWithHint checks that a taken --http port is
// a usage error that names the flag and the address.
func TestServe_HTTPPortInUse_ExitsWithHint(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := start(t, "serve", "--nats-listen", "127.0.0.1:0", "--engine", "memory", "--http", ln.Addr().String())
	if code := p.wait(t, 30*time.Second); code != exitUsage {
		t.Fatalf("exit code %d, want %d", code, exitUsage)
	}
	if e := p.stderr.String(); !strings.Contains(e, "--http "+ln.Addr().String()) || !strings.Contains(e, "already in use") {
		t.Fatalf("stderr %q: want --http, the address, and that it is in use", e)
	}
}

// TestServe_HTTPEmpty_TurnsTheListenerOff checks that --http "" serves
// without an HTTP listener, and says so in its ready line.
func TestServe_HTTPEmpty_TurnsTheListenerOff(t *testing.T) {
	t.Parallel()
	off := openServe(t, "--nats-listen", "127.0.0.1:0", "--engine", "memory", "--http", "")
	off.waitLine(t, `msg="natsdelay ready" .* http=off`, time.Second)
	if got := off.HTTPAddr(); got != "off" {
		t.Fatalf("HTTP address %q with --http \"\", want off", got)
	}
}

// TestParse_HTTP_DefaultEnvFile checks that --http defaults to loopback
// 7070 and that NATSDELAY_HTTP and the config file key http set it.
func TestParse_HTTP_DefaultEnvFile(t *testing.T) {
	if got := parseServe(t, "--nats-listen", "127.0.0.1:0").HTTP; got != defaultHTTP || defaultHTTP != "127.0.0.1:7070" {
		t.Fatalf("default --http %q, want 127.0.0.1:7070", got)
	}
	file := writeConfig(t, `{"http": "127.0.0.1:9090"}`)
	if got := parseServe(t, "--nats-listen", "127.0.0.1:0", "--config", file).HTTP; got != "127.0.0.1:9090" {
		t.Fatalf("--http from the config file %q, want 127.0.0.1:9090", got)
	}
	t.Setenv("NATSDELAY_HTTP", "")
	if got := parseServe(t, "--nats-listen", "127.0.0.1:0", "--config", file).HTTP; got != "" {
		t.Fatalf("NATSDELAY_HTTP=\"\" over the file gave %q, want off", got)
	}
	if _, _, err := parse([]string{"serve", "--nats-listen", "127.0.0.1:0", "--http", "7070"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), `--http "7070"`) {
		t.Fatalf("--http 7070: err %v, want a usage error naming --http", err)
	}
}

// TestServe_HTTP_PProfOnlyWhenAsked checks that /debug/pprof/ is not on the
// HTTP listener by default, is with --pprof, and that --pprof with the
// listener off is a usage error.
func TestServe_HTTP_PProfOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		var extra []string
		want := http.StatusNotFound
		if on {
			extra, want = []string{"--pprof"}, http.StatusOK
		}
		base := serveInProcess(t, t.TempDir(), extra...).httpURL()
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
			if code, body := httpGet(t, base+path); code != want {
				t.Errorf("pprof %v: GET %s: %d %.80q, want %d", on, path, code, body, want)
			}
		}
	}
	code, _, errOut := runCmd(t, "serve", "--pprof", "--http", "")
	if code != exitUsage || !strings.Contains(errOut, "--pprof") || !strings.Contains(errOut, `--http ""`) {
		t.Errorf("serve --pprof --http \"\": exit code %d, stderr %q; want %d and why", code, errOut, exitUsage)
	}
}

// TestServe_UIAuth_Refused checks that serve refuses a --ui-auth it cannot
// use, as a usage error naming the flag, before it starts: with the HTTP
// listener off, with the console off, and a password file that is not one.
func TestServe_UIAuth_Refused(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "ui.htpasswd")
	if err := os.WriteFile(bad, []byte("ops:secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ui-auth", bad, "--http", ""}, `which --http "" turns off`},
		{[]string{"--ui-auth", bad, "--ui=false"}, "the console is off (--ui=false)"},
		{[]string{"--ui-auth", bad, "--engine", "memory"}, "the password is not a bcrypt hash"},
	} {
		code, _, errOut := runCmd(t, append([]string{"serve"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, "--ui-auth") || !strings.Contains(errOut, c.want) {
			t.Errorf("serve %q: exit code %d, stderr %q; want %d saying %q", c.args, code, errOut, exitUsage, c.want)
		}
	}
}
