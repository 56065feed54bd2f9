package console_test

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/console"
)

// passwordFile writes a password file with user's bcrypt'd password, as
// htpasswd -nB writes it, and loads it.
func passwordFile(t testing.TB, user, pass string) *console.Users {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.DefaultCost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ui.htpasswd")
	if err := os.WriteFile(path, []byte("# console users\n"+user+":"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := console.LoadUsers(path)
	if err != nil {
		t.Fatalf("LoadUsers: %v", err)
	}
	return u
}

// TestConsole_OffLoopback_RefusedWithoutAuth checks the rule that keeps
// the console from being open to a network: on a listener that is not on
// a loopback address and without --ui-auth, every console page is refused
// (403, saying why) over real HTTP, while /healthz still answers.
func TestConsole_OffLoopback_RefusedWithoutAuth(t *testing.T) {
	s := serve(t, "0.0.0.0:0", true, nil)
	for _, p := range []string{"/ui/", "/ui/subjects", "/ui/limits", "/ui/static/style.css"} {
		code, body, _ := get(t, s.base+p, "", "")
		mustStatus(t, "GET "+p, code, http.StatusForbidden, body)
		if !strings.Contains(body, "not on a loopback address") || !strings.Contains(body, "--ui-auth") {
			t.Errorf("GET %s: the refusal does not say why: %q", p, body)
		}
	}
	code, body, _ := post(t, s.base+"/ui/limits/pause", url.Values{"pattern": {"orders.>"}}, "", "")
	mustStatus(t, "POST /ui/limits/pause", code, http.StatusForbidden, body)
	code, body, _ = get(t, s.base+"/healthz", "", "")
	mustStatus(t, "GET /healthz", code, http.StatusOK, body)
}

// TestConsole_OffLoopback_PasswordLetsIn checks the way in off loopback:
// without credentials, or with a wrong password or user, the console
// answers 401 with a Basic challenge and shows nothing; with the password
// of the file it serves the pages. Checked over real HTTP.
func TestConsole_OffLoopback_PasswordLetsIn(t *testing.T) {
	s := serve(t, "0.0.0.0:0", true, passwordFile(t, "ops", "correct horse battery staple"))
	s.schedule(t, "orders.1", []byte("hi"), "Delay", "1h")
	for _, c := range []struct{ user, pass string }{{"", ""}, {"ops", "wrong"}, {"nobody", "correct horse battery staple"}} {
		code, body, resp := get(t, s.base+"/ui/subjects", c.user, c.pass)
		mustStatus(t, "GET as "+c.user, code, http.StatusUnauthorized, body)
		if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("GET as %q: WWW-Authenticate %q, want a Basic challenge", c.user, resp.Header.Get("WWW-Authenticate"))
		}
		if strings.Contains(body, "orders.1") {
			t.Errorf("GET as %q: a refusal shows the subjects", c.user)
		}
	}
	code, body, _ := get(t, s.base+"/ui/subjects", "ops", "correct horse battery staple")
	mustStatus(t, "GET as ops", code, http.StatusOK, body)
	if !strings.Contains(body, "orders.1") || !strings.Contains(body, "Logged in as ops") {
		t.Errorf("GET as ops: the page does not list orders.1 for ops:\n%s", body)
	}
}

// TestConsole_POST_CSRFChecked checks that a change needs the page's CSRF
// token and a same-origin request: a cancel without the token, with a
// wrong one, or sent cross-site with the right one is refused (403) and
// the message stays pending; with the token it is canceled and the
// browser is sent back to the subject's list (303). Over real HTTP, with
// a password, as off loopback.
func TestConsole_POST_CSRFChecked(t *testing.T) {
	const user, pass = "ops", "s3cret-enough"
	s := serve(t, "0.0.0.0:0", true, passwordFile(t, user, pass))
	tag := s.schedule(t, "orders.1", []byte("hi"), "Delay", "1h")
	_, page, _ := get(t, s.base+"/ui/message?tag="+tag, user, pass)
	token := csrfOf(t, page)
	form := func(csrf string) url.Values {
		return url.Values{"tag": {tag}, "subject": {"orders.1"}, "csrf": {csrf}}
	}
	for _, c := range []struct {
		what string
		form url.Values
		h    []string
	}{
		{"no token", form(""), nil},
		{"a wrong token", form(token[:len(token)-2] + "xx"), nil},
		{"cross-site", form(token), []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}},
	} {
		code, body, _ := post(t, s.base+"/ui/cancel", c.form, user, pass, c.h...)
		mustStatus(t, "cancel with "+c.what, code, http.StatusForbidden, body)
		if !s.pending(t, tag) {
			t.Fatalf("cancel with %s was refused, yet the message is gone", c.what)
		}
	}
	code, body, resp := post(t, s.base+"/ui/cancel", form(token), user, pass)
	mustStatus(t, "cancel with the token", code, http.StatusSeeOther, body)
	if loc := resp.Header.Get("Location"); !strings.HasPrefix(loc, "/ui/subject?subject=orders.1&done=canceled") {
		t.Errorf("cancel: Location %q, want the subject's list", loc)
	}
	if s.pending(t, tag) {
		t.Fatal("canceled with the token, yet the message is still pending")
	}
	// A GET changes nothing: the cancel endpoint takes POST only.
	code, body, _ = get(t, s.base+"/ui/cancel?tag="+tag+"&csrf="+token, user, pass)
	mustStatus(t, "GET /ui/cancel", code, http.StatusMethodNotAllowed, body)
}

// TestConsole_Loopback_HostChecked checks the console without a password
// on loopback: it serves requests to a loopback host, sets its
// Content-Security-Policy, and refuses a request that names another host
// (a page of another site rebinding its name to 127.0.0.1).
func TestConsole_Loopback_HostChecked(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	code, body, resp := get(t, s.base+"/ui/", "", "")
	mustStatus(t, "GET /ui/", code, http.StatusOK, body)
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy %q: want script-src 'self' and nothing unsafe", csp)
	}
	req, _ := http.NewRequest(http.MethodGet, s.base+"/ui/", nil)
	req.Host = "rebound.example:80"
	code, body, _ = do(t, req)
	mustStatus(t, "GET /ui/ for another host", code, http.StatusForbidden, body)
}

// TestConsole_UIOff checks --ui=false: the listener has no /ui/ at all.
func TestConsole_UIOff(t *testing.T) {
	s := serve(t, "127.0.0.1:0", false, nil)
	code, body, _ := get(t, s.base+"/ui/", "", "")
	mustStatus(t, "GET /ui/ with the console off", code, http.StatusNotFound, body)
}

// TestLoadUsers_Refuses checks that a password file that would let nobody
// in, or anyone in too easily, is refused with every problem and its line.
func TestLoadUsers_Refuses(t *testing.T) {
	weak, _ := bcrypt.GenerateFromPassword([]byte("x"), bcrypt.MinCost)
	good, _ := bcrypt.GenerateFromPassword([]byte("x"), bcrypt.DefaultCost)
	for _, c := range []struct{ name, file, want string }{
		{"empty", "# nobody\n", "names no user"},
		{"plain password", "ops:secret\n", "line 1: user \"ops\": the password is not a bcrypt hash"},
		{"no colon", "ops\n", "line 1: want name:bcrypt-hash"},
		{"weak cost", "ops:" + string(weak) + "\n", "bcrypt cost 4: want 10 or more"},
		{"twice", "ops:" + string(good) + "\nops:" + string(good) + "\n", "line 2: user \"ops\": named twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := console.LoadUsers(path)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("LoadUsers: %v, want an error saying %q", err, c.want)
			}
		})
	}
	if _, err := console.LoadUsers(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("LoadUsers of a missing file: no error")
	}
}

// TestConsole_DoneLine_OnlyWhatTheConsoleDid checks the line a page shows
// after an action: a link that names an outcome and any text in its
// query (a phishing line on the console's own origin) shows nothing of
// it, nor does the console's own redirect with its text changed; the
// redirect the console answered a cancel with shows its outcome.
func TestConsole_DoneLine_OnlyWhatTheConsoleDid(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	const phish = "Your session expired: call +1 555 0100 to unlock it"
	code, body, _ := get(t, s.base+"/ui/?done=canceled&what="+url.QueryEscape(phish), "", "")
	mustStatus(t, "GET /ui/ with a forged outcome", code, http.StatusOK, body)
	if strings.Contains(body, "call +1 555") || strings.Contains(body, `class="done"`) {
		t.Fatalf("a forged outcome is shown on the page:\n%s", body)
	}

	tag := s.schedule(t, "orders.1", []byte("hi"), "Delay", "1h")
	_, page, _ := get(t, s.base+"/ui/message?tag="+tag, "", "")
	form := url.Values{"tag": {tag}, "subject": {"orders.1"}, "csrf": {csrfOf(t, page)}}
	code, body, resp := post(t, s.base+"/ui/cancel", form, "", "")
	mustStatus(t, "cancel", code, http.StatusSeeOther, body)
	loc := resp.Header.Get("Location")
	code, body, _ = get(t, s.base+loc, "", "")
	mustStatus(t, "GET "+loc, code, http.StatusOK, body)
	if !strings.Contains(body, "Canceled "+tag+".") {
		t.Errorf("the page after the cancel does not say what was canceled:\n%s", body)
	}
	forged := strings.Replace(loc, "what="+tag, "what="+url.QueryEscape(phish), 1)
	if forged == loc {
		t.Fatalf("the redirect %q names no tag to change", loc)
	}
	_, body, _ = get(t, s.base+forged, "", "")
	if strings.Contains(body, "call +1 555") {
		t.Errorf("the console's redirect with its text changed shows the text:\n%s", body)
	}
}
