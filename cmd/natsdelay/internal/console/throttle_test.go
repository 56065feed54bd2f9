package console_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/console"
)

// fromAddr is an HTTP client whose connections come from the loopback
// address ip (any of 127.0.0.0/8 on Linux), so that one test plays
// browsers on many machines.
func fromAddr(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 30 * time.Second, Transport: tr}
}

// login asks for the overview as user with pass from client, and returns
// the status.
func login(t *testing.T, c *http.Client, base, user, pass string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/ui/", nil)
	req.SetBasicAuth(user, pass)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET /ui/ as %s: %v", user, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// clock is a login throttle's clock that a test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// throttled starts the console off loopback with alice's password (at
// bcrypt's least cost, so that many guesses take little time), its login
// throttle on a clock the test moves.
func throttled(t *testing.T, pass string) (*served, *clock) {
	t.Helper()
	users := console.CheapUsers("alice", pass)
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	console.SetLoginClock(users, clk.Now)
	return serve(t, "0.0.0.0:0", true, users), clk
}

// TestLogin_Guesser_SlowsOnlyItself checks over real HTTP that a client
// sending wrong passwords as fast as it can is throttled (429 with a
// Retry-After) while alice, from another address, logs in with her
// password at once, every time.
func TestLogin_Guesser_SlowsOnlyItself(t *testing.T) {
	const pass = "correct horse battery staple"
	s, _ := throttled(t, pass)
	guesser, alice := fromAddr(t, "127.0.0.2"), fromAddr(t, "127.0.0.3")
	refused := 0
	for i := range 40 {
		switch code := login(t, guesser, s.base, "alice", "guess-"+strconv.Itoa(i)); code {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("guess %d: status %d", i, code)
		}
	}
	if refused < 30 {
		t.Errorf("the guesser was refused %d of 40 times: want it throttled", refused)
	}
	for i := range 10 {
		if code := login(t, alice, s.base, "alice", pass); code != http.StatusOK {
			t.Fatalf("alice's login %d from another address while the guesser guesses: status %d, want 200", i, code)
		}
	}
}

// TestLogin_ManySourcesGuessOneUser checks the throttle per user: once
// many addresses have each guessed alice's password, an address that
// failed is refused (429) before its own budget runs out, while alice's
// right password from an address that has not failed still logs in; and
// the refusal is not for ever: once the user's budget refills, a
// guesser's address is let check a password again, and alice's right
// password from it logs in.
func TestLogin_ManySourcesGuessOneUser(t *testing.T) {
	const pass = "correct horse battery staple"
	s, clk := throttled(t, pass)
	var guessers []*http.Client
	for i := range 12 {
		g := fromAddr(t, "127.0.1."+strconv.Itoa(i+1))
		guessers = append(guessers, g)
		if code := login(t, g, s.base, "alice", "guess"); code != http.StatusUnauthorized {
			t.Fatalf("the first guess from address %d: status %d, want 401", i, code)
		}
	}
	// Each address has guessed once, far below its own budget; alice's
	// is spent.
	if code := login(t, guessers[0], s.base, "alice", "guess again"); code != http.StatusTooManyRequests {
		t.Fatalf("a second guess at alice from a failing address: status %d, want 429", code)
	}
	if code := login(t, guessers[1], s.base, "alice", pass); code != http.StatusTooManyRequests {
		t.Fatalf("alice's password from a failing address while alice's budget is spent: status %d, want 429", code)
	}
	if code := login(t, fromAddr(t, "127.0.0.4"), s.base, "alice", pass); code != http.StatusOK {
		t.Fatalf("alice's password from an address that has not failed: status %d, want 200", code)
	}
	clk.add(time.Minute)
	if code := login(t, guessers[2], s.base, "alice", pass+" "); code != http.StatusUnauthorized {
		t.Fatalf("a guess from a failing address a minute later: status %d, want 401 (compared)", code)
	}
	if code := login(t, guessers[1], s.base, "alice", pass); code != http.StatusOK {
		t.Fatalf("alice's password from a failing address a minute later: status %d, want 200", code)
	}
}
