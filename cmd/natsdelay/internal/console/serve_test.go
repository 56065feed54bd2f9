package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/console"
	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/server"
)

// TestMain fails the package's tests if any goroutine outlives them: the
// console's sampler, the server and the browser all have owners that stop
// them and wait.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// served is a running natsdelay, assembled as serve assembles it, with a
// client connection to its embedded NATS server.
type served struct {
	srv  *server.Server
	base string // http://host:port of the HTTP listener
	nc   *nats.Conn
}

// serve starts natsdelay with its HTTP listener on httpAddr and the
// console on (users as --ui-auth gives them), on a pebble store in a
// temporary directory, with its options changed by mods; it is closed
// when t ends.
func serve(t testing.TB, httpAddr string, ui bool, users *console.Users, mods ...func(*server.Options)) *served {
	t.Helper()
	o := server.Options{
		Logger: bridgetest.Logger(t), Engine: "pebble", DataDir: t.TempDir(), NATSListen: "127.0.0.1:0",
		HTTP: httpAddr, UI: ui, UIUsers: users,
	}
	o.Service.Engine = "pebble"
	for _, mod := range mods {
		mod(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Open(ctx, o)
	if err != nil {
		t.Fatalf("server.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("server.Close: %v", err)
		}
	})
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	_, port, _ := net.SplitHostPort(srv.HTTPAddr())
	return &served{srv: srv, base: "http://127.0.0.1:" + port, nc: nc}
}

// schedule sends payload to subject through ingest with headers h (name,
// value pairs) and returns the tag of the stored message.
func (s *served) schedule(t testing.TB, subject string, payload []byte, h ...string) string {
	t.Helper()
	m := nats.NewMsg(wire.DefaultIngestPrefix + "." + subject)
	m.Data = payload
	for i := 0; i+1 < len(h); i += 2 {
		m.Header.Set(h[i], h[i+1])
	}
	rep, err := s.nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatalf("schedule on %s: %v", subject, err)
	}
	if err := wire.ParseError(rep.Header, rep.Data); err != nil {
		t.Fatalf("schedule on %s: %v", subject, err)
	}
	var ack struct {
		Tag string `json:"tag"`
	}
	if err := json.Unmarshal(rep.Data, &ack); err != nil || ack.Tag == "" {
		t.Fatalf("schedule on %s: no tag in the answer %q", subject, rep.Data)
	}
	tag := ack.Tag
	return tag
}

// api asks the API's verb with body and decodes the answer into out; it
// returns the service error of an error answer.
func (s *served) api(t testing.TB, verb string, body, out any) error {
	t.Helper()
	b, _ := json.Marshal(body)
	rep, err := s.nc.Request(wire.DefaultAPIPrefix+"."+verb, b, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", verb, err)
	}
	if err := wire.ParseError(rep.Header, rep.Data); err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(rep.Data, out); err != nil {
			t.Fatalf("%s: decode %q: %v", verb, rep.Data, err)
		}
	}
	return nil
}

// client is an HTTP client that does not follow redirects, so that a
// test sees the 303 after a POST.
var client = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// do sends req and returns the status, the body and the response.
func do(t testing.TB, req *http.Request) (int, string, *http.Response) {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", req.Method, req.URL, err)
	}
	return resp.StatusCode, string(b), resp
}

// get GETs url, as user with pass when user is set.
func get(t testing.TB, url, user, pass string) (int, string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	return do(t, req)
}

// post POSTs form to url, as user with pass when user is set, with the
// extra headers h (name, value pairs).
func post(t testing.TB, url string, form url.Values, user, pass string, h ...string) (int, string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	return do(t, req)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrfOf is the CSRF token in a page's forms.
func csrfOf(t testing.TB, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

// pending reports whether the message tag is pending, asked over the API.
func (s *served) pending(t testing.TB, tag string) bool {
	t.Helper()
	err := s.api(t, wire.VerbGet, wire.MessageRef{Tag: tag}, nil)
	switch {
	case err == nil:
		return true
	case wire.Code(err) == 404:
		return false
	}
	t.Fatalf("GET %s: %v", tag, err)
	return false
}

func mustStatus(t testing.TB, what string, got, want int, body string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: status %d, want %d; body:\n%s", what, got, want, body)
	}
}
