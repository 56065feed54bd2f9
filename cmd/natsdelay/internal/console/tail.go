package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// The live tail shows the service's lifecycle events (serve --events) as
// they happen: the page opens an event stream (Server-Sent Events) at
// tail/stream, whose handler subscribes to the events of the page's
// filter and writes each one's body, as the service published it, to the
// browser.
//
// # Its own NATS connection
//
// The tail subscribes on a connection of the console's own (SetEvents),
// not on the service's: the NATS server cuts a client that does not take
// what it is sent fast enough (a slow consumer), and nats.go marks a
// connection whose subscription overflows; a tail of every event also
// doubles the traffic it rides on (each event goes out, and comes back).
// On a connection of its own, none of that touches the connection that
// takes and delivers messages. It also works on every node of a cluster:
// the leader publishes the events, and any node's connection hears them.
//
// # Never blocking, never leaking
//
// Each stream runs on its request's goroutine, which net/http owns; it
// starts none. Its subscription hands events to a channel of tailBuffer
// events, into which nats.go's reader never waits: when the browser
// does not keep up the channel fills, and the events that find it full
// are dropped and counted (Subscription.Dropped), and the page shows the
// count. A write to a browser that takes nothing for tailWriteTimeout
// ends the stream, and so does TailIdle with no event to send: a client
// that holds streams and reads nothing while no events flow gives their
// places back on time (its browser's page opens a new stream). The
// stream ends, and unsubscribes, when the browser goes (the request's
// context), when its subscription closes (the connection closed), or
// when StopTail, called before the service stops and by Close, ends
// every stream and waits for them.

// tailSource is what the live tail reads of the service: the subject its
// lifecycle events for a filter are published to.
type tailSource interface {
	// EventSubject is the subject of the events of kind ("" for every
	// kind) about subjects that match filter ("" for all); a 400 for a
	// bad filter or kind, bridge.ErrEventsOff when events are off.
	EventSubject(filter, kind string) (string, error)
}

// EventConn is the NATS connection the live tail subscribes on: a
// *nats.Conn of the console's own (see above).
type EventConn interface {
	ChanSubscribe(subject string, ch chan *nats.Msg) (*nats.Subscription, error)
	FlushTimeout(time.Duration) error
	// LastError is the connection's last error: after the flush that
	// follows a subscribe, a permissions violation that names the
	// subject says that the subscription was refused.
	LastError() error
}

const (
	// tailBuffer is how many events wait for one browser; past it, events
	// are dropped and counted.
	tailBuffer = 256
	// maxTails bounds the streams open at once, so that tails cost at
	// most maxTails subscriptions and buffers.
	maxTails = 32
	// tailWriteTimeout ends a stream whose browser takes nothing for so
	// long.
	tailWriteTimeout = 10 * time.Second
	// tailKeepalive is how often an idle stream writes a comment, so that
	// proxies keep it open and a gone browser is noticed; it also sends
	// the drop count, and checks the subscription.
	tailKeepalive = 15 * time.Second
	// tailRetry is how long a browser waits before it opens the stream
	// again after it ended, in milliseconds.
	tailRetry = 3000
	// tailMaxBatch is how many waiting events one write sends at most,
	// before the drop count and the flush.
	tailMaxBatch = 64
	// subscribeTimeout bounds the wait for the NATS server to confirm a
	// stream's subscription.
	subscribeTimeout = 5 * time.Second
)

// tails are the open streams.
type tails struct {
	conn atomic.Pointer[EventConn] // nil until SetEvents

	mu      sync.Mutex
	open    int
	stopped bool
	stop    chan struct{} // closed by StopTail
	wg      sync.WaitGroup
}

func newTails() *tails { return &tails{stop: make(chan struct{})} }

// errNoTailConn is the answer to a stream before SetEvents.
var errNoTailConn = fmt.Errorf("%w: the live tail has no NATS connection: the service is starting, or the console could not connect (see the log)", wire.ErrUnavailable)

// errTailsStopped is the answer to a stream asked for after StopTail.
var errTailsStopped = errors.New("the console is stopping")

// enter counts a stream in; the caller calls leave.
func (t *tails) enter() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.stopped:
		return errTailsStopped
	case t.open >= maxTails:
		return errors.New("too many live tails are open (" + strconv.Itoa(maxTails) + "): close one, or try again later")
	}
	t.open++
	t.wg.Add(1)
	return nil
}

func (t *tails) leave() {
	t.mu.Lock()
	t.open--
	t.mu.Unlock()
	t.wg.Done()
}

// SetEvents gives the live tail the connection it subscribes on. Without
// it, the tail answers 503.
func (c *Console) SetEvents(conn EventConn) { c.tails.conn.Store(&conn) }

// StopTail ends every live tail's stream, telling its browser why, and
// waits for them; streams asked for later are refused. The server calls
// it before it stops the service; Close calls it too.
func (c *Console) StopTail() {
	t := c.tails
	t.mu.Lock()
	if !t.stopped {
		t.stopped = true
		close(t.stop)
	}
	t.mu.Unlock()
	t.wg.Wait()
}

func (c *Console) routeTail() {
	c.mux.HandleFunc("GET "+Prefix+"tail", c.tail)
	c.mux.HandleFunc("GET "+Prefix+"tail/stream", c.tailStream)
}

type tailData struct {
	Subject, Kind string
	Kinds         []string
	// Off is set when the service publishes no events.
	Off bool
	// Watch is the NATS subject the filter subscribes to, and Stream the
	// address of its event stream; both empty when there is none to open.
	Watch, Stream string
}

// tail is the live tail's page: the filter's form, and the table its
// script fills from the stream.
func (c *Console) tail(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := tailData{Subject: strings.TrimSpace(q.Get("subject")), Kind: q.Get("kind"), Kinds: wire.EventKinds()}
	s := c.service()
	if s == nil {
		c.render(w, r, http.StatusOK, "tail", Prefix+"tail", "Live tail", d, errStarting)
		return
	}
	watch, err := s.EventSubject(d.Subject, d.Kind)
	switch {
	case errors.Is(err, bridge.ErrEventsOff):
		d.Off = true
		err = nil
	case err == nil:
		d.Watch = watch
		d.Stream = Prefix + "tail/stream?subject=" + url.QueryEscape(d.Subject) + "&kind=" + url.QueryEscape(d.Kind)
	}
	c.render(w, r, http.StatusOK, "tail", Prefix+"tail", "Live tail", d, err)
}

// tailStream streams the events of the filter in its query, as
// Server-Sent Events: first "subscribed" once the NATS server has the
// subscription (data: {"subject": ...}); then each event as a message of
// the default type whose data is the event's body as published; "dropped"
// (data: the count) when events were dropped for this browser; and "end"
// (data: why) when the console ends the stream.
func (c *Console) tailStream(w http.ResponseWriter, r *http.Request) {
	s := c.service()
	if s == nil {
		refuse(w, errStarting)
		return
	}
	q := r.URL.Query()
	subject, err := s.EventSubject(strings.TrimSpace(q.Get("subject")), q.Get("kind"))
	if err != nil {
		refuse(w, err)
		return
	}
	connp := c.tails.conn.Load()
	if connp == nil {
		refuse(w, errNoTailConn)
		return
	}
	if err := c.tails.enter(); err != nil {
		w.Header().Set("Retry-After", "5")
		refuse(w, unavailable(err))
		return
	}
	defer c.tails.leave()
	ts, err := subscribeTail(*connp, subject)
	if ts != nil {
		defer func() { _ = ts.sub.Unsubscribe() }()
	}
	if errors.Is(err, nats.ErrPermissionViolation) {
		refuse(w, fmt.Errorf("%w: the NATS server refused the live tail's subscription to %s: give the service's NATS user subscribe permission on %s (docs/operations.md, NATS permissions)",
			wire.ErrUnavailable, subject, eventsAll(s)))
		return
	}
	if err != nil {
		refuse(w, unavailable(err))
		return
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no") // NB: a proxy in front must not hold events back
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	sw.retry(tailRetry)
	hello, _ := json.Marshal(struct {
		Subject string `json:"subject"`
	}{subject})
	sw.event("subscribed", hello)
	if sw.flush() == nil {
		c.pumpTail(r.Context(), sw, ts)
	}
}

// tailSub is a stream's subscription: events arrive on ch, and closed
// is closed when the connection closes it.
type tailSub struct {
	sub     *nats.Subscription
	ch      chan *nats.Msg
	closed  chan struct{}
	dropped int // the drop count the browser was told
}

// subscribeTail subscribes to subject on conn and waits for the NATS
// server to confirm it; a refused subscription is an error that wraps
// nats.ErrPermissionViolation. A tailSub not nil is to be unsubscribed,
// error or not.
func subscribeTail(conn EventConn, subject string) (*tailSub, error) {
	ts := &tailSub{ch: make(chan *nats.Msg, tailBuffer), closed: make(chan struct{})}
	sub, err := conn.ChanSubscribe(subject, ts.ch)
	if err != nil {
		return nil, err
	}
	ts.sub = sub
	// NB: nats.go does not close the channel of a subscription whose
	// connection closes; its closed handler tells.
	var once sync.Once
	sub.SetClosedHandler(func(string) { once.Do(func() { close(ts.closed) }) })
	if err := conn.FlushTimeout(subscribeTimeout); err != nil {
		return ts, err
	}
	// NB: the server answers a refused SUB with an error before the PONG
	// of the flush, so it is known by now.
	if err := conn.LastError(); errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
		return ts, err
	}
	return ts, nil
}

// errTailConnClosed is why a stream ends when the console's NATS
// connection closed.
const errTailConnClosed = "the console's NATS connection closed"

// pumpTail writes ts's events to the browser until the browser goes, the
// write to it times out, the tails stop, the connection closes, or no
// event came for TailIdle: a stream is ended on time, not only when a
// browser that reads nothing has let its buffers fill, so that streams
// held open by a client that reads nothing give their places back while
// no events flow.
func (c *Console) pumpTail(ctx context.Context, sw *sseWriter, ts *tailSub) {
	keepalive := time.NewTicker(tailKeepalive)
	defer keepalive.Stop()
	idle := time.NewTimer(c.cfg.TailIdle)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.tails.stop:
			sw.end(errTailsStopped.Error())
			return
		case <-ts.closed:
			sw.end(errTailConnClosed)
			return
		case <-idle.C:
			sw.end("no event for " + c.cfg.TailIdle.String() + ": the page opens a new stream")
			return
		case m := <-ts.ch:
			ts.batch(sw, m)
			idle.Reset(c.cfg.TailIdle)
		case <-keepalive.C:
			if !ts.sub.IsValid() {
				sw.end(errTailConnClosed)
				return
			}
			sw.comment("keepalive")
			ts.report(sw)
		}
		if sw.flush() != nil {
			return
		}
	}
}

// batch adds m and the events that wait behind it, up to tailMaxBatch,
// to what is written, then the drop count.
func (ts *tailSub) batch(sw *sseWriter, m *nats.Msg) {
	sw.event("", m.Data)
	for range tailMaxBatch - 1 {
		select {
		case m := <-ts.ch:
			sw.event("", m.Data)
		default:
			ts.report(sw)
			return
		}
	}
	ts.report(sw)
}

// report adds the drop count to what is written, if it grew.
func (ts *tailSub) report(sw *sseWriter) {
	if n, err := ts.sub.Dropped(); err == nil && n > ts.dropped {
		ts.dropped = n
		sw.event("dropped", strconv.AppendInt(nil, int64(n), 10))
	}
}

// eventsAll is the subject of every event, <prefix>.>.
func eventsAll(s tailSource) string {
	all, _ := s.EventSubject("", "")
	return strings.TrimSuffix(all, ".*.>") + ".>"
}

// refuse answers a stream that cannot start with err's status and text,
// as the API would answer ("400 bad request: ..."); an EventSource does
// not open again after such an answer.
func refuse(w http.ResponseWriter, err error) {
	http.Error(w, wire.NewServiceError(err).Error(), httpStatus(err))
}

// unavailable wraps err as a 503.
func unavailable(err error) error {
	return fmt.Errorf("%w: %w", wire.ErrUnavailable, err)
}

// sseWriter writes Server-Sent Events into a buffer, and the buffer to
// the browser on flush, each write bounded by tailWriteTimeout.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
}

func (s *sseWriter) retry(ms int) {
	s.buf = append(strconv.AppendInt(append(s.buf, "retry: "...), int64(ms), 10), '\n')
}

func (s *sseWriter) comment(text string) {
	s.buf = append(append(append(s.buf, ": "...), text...), '\n', '\n')
}

// event adds an event of type name ("" for the default, message) with
// data; each line of data is a data field, so that no byte of it can end
// the event early or add a field.
func (s *sseWriter) event(name string, data []byte) {
	if name != "" {
		s.buf = append(append(append(s.buf, "event: "...), name...), '\n')
	}
	data = bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	data = bytes.ReplaceAll(data, []byte("\r"), []byte("\n"))
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		s.buf = append(append(append(s.buf, "data: "...), line...), '\n')
	}
	s.buf = append(s.buf, '\n')
}

// end adds an "end" event saying why, and writes it.
func (s *sseWriter) end(why string) {
	s.event("end", []byte(why))
	_ = s.flush()
}

// flush writes what is buffered and flushes it to the browser.
func (s *sseWriter) flush() error {
	// NB: a browser that takes nothing for tailWriteTimeout ends the
	// stream; net/http then closes the connection.
	_ = s.rc.SetWriteDeadline(time.Now().Add(tailWriteTimeout))
	_, err := s.w.Write(s.buf)
	s.buf = s.buf[:0]
	if err == nil {
		err = s.rc.Flush()
	}
	return err
}
