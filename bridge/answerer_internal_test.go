package bridge

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// heldConn is an answerConn whose publishes wait until release is closed;
// entered is told of each publish as it starts.
type heldConn struct {
	entered chan string
	release chan struct{}

	mu   sync.Mutex
	sent []string // subject:data, or subject:error code, in order
}

func newHeldConn() *heldConn {
	return &heldConn{entered: make(chan string, 1024), release: make(chan struct{})}
}

func (c *heldConn) Publish(subject string, data []byte) error {
	return c.record(subject + ":" + string(data))
}

func (c *heldConn) PublishMsg(m *nats.Msg) error {
	return c.record(m.Subject + ":" + m.Header.Get(wire.HeaderServiceErrorCode))
}

func (c *heldConn) record(s string) error {
	c.entered <- s
	<-c.release
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, s)
	return nil
}

func (c *heldConn) published() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.sent...)
}

// fillHeld hands over one answer, which the goroutine takes and holds in
// its publish, then size more, which fill the queue. It returns what it
// handed over, in order.
func fillHeld(t *testing.T, a *answerer, c *heldConn, size int) []string {
	t.Helper()
	a.reply("r.0", []byte("a"))
	if got := <-c.entered; got != "r.0:a" {
		t.Fatalf("first publish %q, want r.0:a", got)
	}
	want := []string{"r.0:a"}
	for i := 1; i <= size; i++ {
		r := fmt.Sprintf("r.%d", i)
		if i%2 == 0 {
			a.fail(r, unavailable("down"))
			want = append(want, r+":503")
			continue
		}
		a.reply(r, []byte("a"))
		want = append(want, r+":a")
	}
	if st := a.Stats(); st.Queued != size || st.Full != 0 {
		t.Fatalf("after filling: %+v, want %d queued, none dropped", st, size)
	}
	return want
}

// TestAnswerer_BlockedConnection_HandOverBounded checks that a connection
// that takes no answers holds the goroutines handing them over (the writer,
// the deleter) up by at most one wait per congestion: once a wait for room
// timed out, later answers are dropped at once, and counted, until the
// queue has room again; then the answers queued go out in order.
func TestAnswerer_BlockedConnection_HandOverBounded(t *testing.T) {
	c := newHeldConn()
	const size = 4
	a := newAnswerer(c, size, time.Millisecond)
	want := fillHeld(t, a, c, size)

	a.reply("dropped.0", []byte("a")) // waits a millisecond, then drops
	// NB: were a hand-over to wait again while congested, this would
	// hold the test for an hour.
	a.wait = time.Hour
	for i := range 100 {
		a.reply(fmt.Sprintf("dropped.%d", i+1), []byte("a"))
	}
	if st := a.Stats(); st.Full != 101 || st.Queued != size || st.Sent != 0 {
		t.Fatalf("blocked: %+v, want 101 dropped as full, %d queued, none sent", st, size)
	}

	close(c.release)
	a.Close()
	if got := c.published(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	if st := a.Stats(); st.Sent != size+1 || st.Queued != 0 {
		t.Fatalf("after Close: %+v, want %d sent, none queued", st, size+1)
	}
}

// TestAnswerer_Close_PublishesQueued checks that Close publishes every
// answer queued before it, in order, however long the connection takes,
// and that an answer handed over after it is counted, not lost unseen.
func TestAnswerer_Close_PublishesQueued(t *testing.T) {
	c := newHeldConn()
	const size = 8
	a := newAnswerer(c, size, time.Hour)
	want := fillHeld(t, a, c, size)

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		a.Close()
	}()
	close(c.release)
	<-closed
	if got := c.published(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	a.reply("late", []byte("a"))
	if st := a.Stats(); st.Sent != size+1 || st.Late != 1 || st.Queued != 0 {
		t.Fatalf("after Close: %+v, want %d sent, 1 late, none queued", st, size+1)
	}
}

// failingConn refuses every publish.
type failingConn struct{}

func (failingConn) Publish(string, []byte) error { return nats.ErrConnectionClosed }
func (failingConn) PublishMsg(*nats.Msg) error   { return nats.ErrConnectionClosed }

// TestAnswerer_RefusedPublish_Counted checks that answers the connection
// refuses are counted as failed, not as sent.
func TestAnswerer_RefusedPublish_Counted(t *testing.T) {
	a := newAnswerer(failingConn{}, 4, time.Hour)
	a.reply("r.1", []byte("a"))
	a.fail("r.2", errors.New("x"))
	a.Close()
	if st := a.Stats(); st.Failed != 2 || st.Sent != 0 {
		t.Fatalf("%+v, want 2 failed, none sent", st)
	}
}
